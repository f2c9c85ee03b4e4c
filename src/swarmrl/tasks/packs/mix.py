"""Which tasks each work unit of a run holds once community packs are in it: the run's own, or one pack's.

The coordinator fixes the mix of a step once (the packs in the run and their shares, `community_shares`) and
every node reads the same one; a unit's source is then a pure function of public values (`unit_pack`), so a
worker, its validator and the trainer all derive it alike and a worker cannot pick which units are a pack's.
A whole unit is one source: its prompts are drawn by the unit's seed from that source only, as from the run's
own tasks (`rollouts.assignment`), and its rows name tasks of that source (`pack_tasks`).

Shares, from the run's `[tasks.community]`: packs on probation split `probation_share` equally; admitted packs
split what is left of `max_share` equally; then each author's packs together are scaled down to
`per_author_cap`. Share freed by the cap is not handed on (the run's own tasks keep it).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from swarmrl.configs.task_packs import CommunityTasksConfig
from swarmrl.tasks.packs.pack import TaskPack
from swarmrl.tasks.task import ListTaskSource

TASK_ID_PREFIX = "pack-"
_DIGEST_CHARS = 16


@dataclass(frozen=True)
class MixCandidate:
    """A pack that may take units: admitted, or on probation."""

    pack_id: int
    digest: str
    author: str
    probation: bool


@dataclass(frozen=True)
class PackShare:
    """A pack in a step's mix and the share of the step's units it gets."""

    pack_id: int
    digest: str
    author: str
    share: float
    probation: bool


def community_shares(candidates: Sequence[MixCandidate], config: CommunityTasksConfig) -> list[PackShare]:
    """The share of each candidate (in the order given), as the module docstring says."""
    if not config.accept or not candidates:
        return []
    on_probation = [c for c in candidates if c.probation]
    admitted = [c for c in candidates if not c.probation]
    probation_total = min(config.probation_share, config.max_share) if on_probation else 0.0
    shares = {c.pack_id: probation_total / len(on_probation) for c in on_probation}
    if admitted:
        rest = max(0.0, config.max_share - probation_total)
        shares.update({c.pack_id: rest / len(admitted) for c in admitted})
    by_author: dict[str, float] = defaultdict(float)
    for candidate in candidates:
        by_author[candidate.author] += shares[candidate.pack_id]
    result = []
    for candidate in candidates:
        total = by_author[candidate.author]
        scale = config.per_author_cap / total if total > config.per_author_cap else 1.0
        share = shares[candidate.pack_id] * scale
        if share > 0:
            result.append(PackShare(**dataclasses.asdict(candidate), share=share))
    return result


def unit_draw(run_id: str, step: int, batch_index: int) -> float:
    """A uniform number in [0, 1) fixed by the unit: where it falls among the shares picks its source."""
    digest = hashlib.sha256(f"swarmrl-unit-source\x1f{run_id}\x1f{step}\x1f{batch_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def unit_pack(shares: Sequence[PackShare], run_id: str, step: int, batch_index: int) -> PackShare | None:
    """The pack whose rows fill unit (step, batch_index), or None: the run's own tasks."""
    draw, bound = unit_draw(run_id, step, batch_index), 0.0
    for entry in shares:
        bound += entry.share
        if draw < bound:
            return entry
    return None


def pack_task_id(digest: str, row_id: str) -> str:
    return f"{TASK_ID_PREFIX}{digest[:_DIGEST_CHARS]}/{row_id}"


def pack_tasks(pack: TaskPack) -> ListTaskSource:
    """The pack's rows as a task source of the run: row i is task i, named after the pack and the row."""
    tasks = [
        dataclasses.replace(row.task, task_id=pack_task_id(pack.digest, row.row_id)) for row in pack.rows
    ]
    return ListTaskSource(f"{TASK_ID_PREFIX}{pack.digest[:_DIGEST_CHARS]}", tasks)
