"""The tasks of each work unit in a swarm that takes community packs, as every role derives them.

A worker (which prompts to answer), a validator and the trainer (which prompts the file had to answer, and
how its rows are scored) each ask `unit(step, batch_index)`: the step's mix comes from the coordinator once per
step, a pack's archive once per pack, checked against the digest the mix names (so a pack is the very one its
author signed and the validators admitted). Where the run takes no packs the mix is empty and every unit is
the run's own tasks. Nothing here talks to the coordinator itself: a role hands in the two fetches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from swarmrl.configs.task_packs import PackLimitsConfig
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.files import archive_files
from swarmrl.tasks.packs.mix import PackShare, pack_tasks, unit_pack
from swarmrl.tasks.packs.pack import TaskPack, pack_from_files
from swarmrl.tasks.task import TaskSource

MixFetch = Callable[[int], Sequence[PackShare]]  # step → the step's mix
ArchiveFetch = Callable[[PackShare], bytes]  # a pack of a mix → its archive's bytes
KEPT_STEPS = 64


@dataclass(frozen=True)
class UnitTasks:
    """Where a unit's prompts come from: the run's own tasks, or one pack's rows (`share` says which)."""

    tasks: TaskSource
    pack: TaskPack | None = None
    share: PackShare | None = None

    @property
    def on_probation(self) -> bool:
        return self.share is not None and self.share.probation


class CommunityTasks:
    def __init__(
        self,
        base: TaskSource,
        run_id: str,
        limits: PackLimitsConfig,
        mix_of: MixFetch | None = None,
        archive_of: ArchiveFetch | None = None,
    ) -> None:
        self.base, self.run_id, self.limits = base, run_id, limits
        self._mix_of, self._archive_of = mix_of, archive_of
        self._mixes: OrderedDict[int, list[PackShare]] = OrderedDict()
        self._packs: dict[str, tuple[TaskPack, TaskSource]] = {}
        self._lock = threading.Lock()

    def mix(self, step: int) -> list[PackShare]:
        if self._mix_of is None:
            return []
        with self._lock:
            if step not in self._mixes:
                self._mixes[step] = list(self._mix_of(step))
                while len(self._mixes) > KEPT_STEPS:
                    self._mixes.popitem(last=False)
            return self._mixes[step]

    def unit(self, step: int, batch_index: int | None) -> UnitTasks:
        share = None if batch_index is None else unit_pack(self.mix(step), self.run_id, step, batch_index)
        if share is None:
            return UnitTasks(self.base)
        pack, tasks = self.pack(share)
        return UnitTasks(tasks, pack, share)

    def pack(self, share: PackShare) -> tuple[TaskPack, TaskSource]:
        """The pack a mix names and its rows as tasks, fetched once and checked against its digest."""
        with self._lock:
            if share.digest not in self._packs:
                assert self._archive_of is not None  # a mix with packs came from a fetch
                origin = f"pack {share.pack_id}"
                pack = pack_from_files(
                    archive_files(self._archive_of(share), origin, self.limits), self.limits
                )
                if pack.digest != share.digest:
                    raise PackError(
                        f"{origin}: the archive's digest {pack.digest} is not the mix's {share.digest}"
                    )
                self._packs[share.digest] = (pack, pack_tasks(pack))
            return self._packs[share.digest]
