"""Generation engines with seeded sampling and hidden-state capture, and the prefill that checks them.

Names are imported on first use, so importing the package does not load torch.
The validator's `prefill` function is imported from `swarmrl.inference.prefill`: lazily, the package's
`prefill` attribute is that submodule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.lazy_exports import lazy_exports

_EXPORTS = {
    "HIDDEN_STATE_DTYPE": "swarmrl.inference.engine",
    "FinishReason": "swarmrl.inference.engine",
    "Generation": "swarmrl.inference.engine",
    "GenerationRequest": "swarmrl.inference.engine",
    "InferenceEngine": "swarmrl.inference.engine",
    "SamplingParams": "swarmrl.inference.engine",
    "InferenceError": "swarmrl.inference.errors",
    "InvalidRequestError": "swarmrl.inference.errors",
    "UnsupportedModelError": "swarmrl.inference.errors",
    "WeightLoadError": "swarmrl.models.checkpoint",
    "build_engine": "swarmrl.inference.factory",
    "PagedEngine": "swarmrl.inference.paged.engine",
    "PrefillResult": "swarmrl.inference.prefill",
    "completion_logprobs": "swarmrl.inference.prefill",
    "choice_margins": "swarmrl.inference.sampler",
    "gumbel_noise": "swarmrl.inference.sampler",
    "logprobs_of": "swarmrl.inference.sampler",
    "sample_tokens": "swarmrl.inference.sampler",
    "sampling_log_probs": "swarmrl.inference.sampler",
    "TorchEngine": "swarmrl.inference.torch_engine",
}

__all__ = [
    "HIDDEN_STATE_DTYPE",
    "FinishReason",
    "Generation",
    "GenerationRequest",
    "InferenceEngine",
    "InferenceError",
    "InvalidRequestError",
    "PagedEngine",
    "PrefillResult",
    "SamplingParams",
    "TorchEngine",
    "UnsupportedModelError",
    "WeightLoadError",
    "build_engine",
    "choice_margins",
    "completion_logprobs",
    "gumbel_noise",
    "logprobs_of",
    "sample_tokens",
    "sampling_log_probs",
]

if TYPE_CHECKING:
    from swarmrl.inference.engine import (
        HIDDEN_STATE_DTYPE,
        FinishReason,
        Generation,
        GenerationRequest,
        InferenceEngine,
        SamplingParams,
    )
    from swarmrl.inference.errors import InferenceError, InvalidRequestError, UnsupportedModelError
    from swarmrl.inference.factory import build_engine
    from swarmrl.inference.paged.engine import PagedEngine
    from swarmrl.inference.prefill import PrefillResult, completion_logprobs
    from swarmrl.inference.sampler import (
        choice_margins,
        gumbel_noise,
        logprobs_of,
        sample_tokens,
        sampling_log_probs,
    )
    from swarmrl.inference.torch_engine import TorchEngine
    from swarmrl.models.checkpoint import WeightLoadError


__getattr__ = lazy_exports(__name__, _EXPORTS)
