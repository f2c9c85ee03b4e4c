"""Policy version numbering under merges: merges happen at island steps H, 2H, 3H, ...

A merge at step k replaces that step's local policy: checkpoint `step_k` of every island that took part is
the merged policy (bit-identical across them), so versions stay one monotone integer per island and a
worker's `async_level` or a validator's lookup by step needs no new rule. These helpers say which
versions are merged ones.

With F streaming fragments (Streaming DiLoCo) each window of H steps holds F merges, fragment f's after step
(f + 1) * H // F of the window: each merge sends 1/F of the parameters, so the traffic per merge point is F
times smaller for the same total, and version `step` is merged in the fragment that merged at it.
"""

from __future__ import annotations

from swarmrl.diloco.outer import fragment_send_steps


def _check(step: int, every: int) -> None:
    if every < 1:
        raise ValueError(f"merge interval must be >= 1, got {every}")
    if step < 0:
        raise ValueError(f"policy step must be >= 0, got {step}")


def is_merge_step(step: int, every: int) -> bool:
    """True when the trainer merges after producing policy `step` (step 0 is the shared start)."""
    _check(step, every)
    return step > 0 and step % every == 0


def merging_fragment(step: int, every: int, fragments: int = 1) -> int | None:
    """The fragment whose merge follows policy `step`, or None when no merge does (F = 1: fragment 0 at H, 2H, ...)."""
    _check(step, every)
    if not 1 <= fragments <= every:
        raise ValueError(f"fragments must be in 1..{every} (the merge interval), got {fragments}")
    if step == 0:
        return None
    offset = (step - 1) % every + 1  # 1..H within the window
    sends = fragment_send_steps(fragments, every)
    return sends.index(offset) if offset in sends else None


def merge_round(step: int, every: int) -> int:
    """Number of merge points at or before `step` (round r merges at step r * every)."""
    _check(step, every)
    return step // every


def last_merged_step(step: int, every: int) -> int:
    """Newest version <= `step` that is a merged (or the shared starting) policy."""
    return merge_round(step, every) * every


def steps_since_merge(step: int, every: int) -> int:
    """Local steps in the current pseudo-gradient (how far policy `step` drifted from the last merge)."""
    return step - last_merged_step(step, every)
