"""The seed a node must use for (step, batch index): a pure function the validator recomputes.

Without a run secret it equals `swarmrl.rollouts.assignment.batch_seed`, so a swarm with no secret can check
seeds offline. With one (the coordinator default), a node learns each seed only when the step opens, so it
cannot grind keys for easy future prompts before joining.
"""

from __future__ import annotations

import hashlib
import hmac

from swarmrl.rollouts.assignment import batch_seed

_SEED_MASK = (1 << 63) - 1


def task_seed(run_id: str, node_id: str, step: int, batch_index: int, run_secret: str = "") -> int:
    """A 63-bit seed for the node's prompts and sampling at (step, batch_index)."""
    if step < 0 or batch_index < 0:
        raise ValueError("step and batch_index are non-negative")
    if not run_secret:
        return batch_seed(run_id, node_id, step, batch_index)
    message = "\x1f".join(("batch", run_id, node_id.lower(), str(step), str(batch_index))).encode()
    digest = hmac.new(run_secret.encode(), message, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") & _SEED_MASK
