"""One lock for building models in this process.

transformers builds a model by swapping process-wide functions in and out (`PreTrainedModel.tie_weights` and
`init_weights`, torch's init functions), and so does `trainer.sharded_load.parameters_on_meta`
(`nn.Module.register_parameter`). Two threads building at once interleave those swaps and can leave one in
place for the rest of the process: every later model's LM head then stays untied from its embedding. Every
model swarmrl builds is built under this lock (a trainer and a local worker or an evaluator may share a
process).
"""

from __future__ import annotations

import threading

MODEL_CONSTRUCTION = threading.RLock()
