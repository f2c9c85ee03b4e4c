"""One island's trainer: the local trainer of its run directory, with a merge every `merge_every` policy steps.

The island joins the islands' torchft lighthouse under a stable replica id, so a restarted island is the
same member coming back: its first merge finds peers ahead of it, torchft heals it with their merged state
(global policy, outer momentum, round count) and it continues from the merged policy. Peers are not trusted:
their state arrives as plain data (`heal_transport`), is checked before it is adopted and is adopted only by
an island that has not merged since it started (`IslandMerger.heal_from_peer`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from swarmrl.configs import load_run_config
from swarmrl.configs.islands import IslandsConfig
from swarmrl.coordinator.api import ISLANDS_PREFIX
from swarmrl.diloco.codecs import make_codec
from swarmrl.diloco.communicators.torchft_comm import replica_manager
from swarmrl.islands.communicator import QuorumCommunicator
from swarmrl.islands.merge import IslandMerger, MergeRecord, PendingMerge
from swarmrl.islands.versions import merging_fragment
from swarmrl.models import load_model
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir
from swarmrl.trainer.role import trainer_role

if TYPE_CHECKING:
    from torchft import Manager

    from swarmrl.islands.heal_transport import WeightsOnlyHTTPTransport

log = logging.getLogger(__name__)


def merges_log(rundir: RunDir) -> Path:
    return rundir.root / "merges.jsonl"


def merge_state_path(rundir: RunDir) -> Path:
    return rundir.root / "merge_state.pt"


class MergeHook:
    """The trainer's `after_step`: builds the merger around the trainer's model, merges at merge steps."""

    def __init__(
        self, rundir: RunDir, settings: IslandsConfig, communicator: QuorumCommunicator, last_step: int
    ) -> None:
        self.rundir = rundir
        self.settings = settings
        self.communicator = communicator
        self.last_step = last_step
        self.merger: IslandMerger | None = None
        self.pending: PendingMerge | None = None  # a round launched in the background, not landed yet

    def attach(self, model: torch.nn.Module) -> IslandMerger:
        """The policy of the last merge is this island's saved merge state, or the shared step 0."""
        merger = IslandMerger(
            model,
            self.communicator,
            make_codec(self.settings.codec, self.settings.int8_clip_sigmas),
            outer_lr=self.settings.outer_lr,
            outer_momentum=self.settings.outer_momentum,
            fragments=self.settings.fragments,
            max_norm_ratio=self.settings.max_norm_ratio,
            heal_max_change=self.settings.heal_max_change,
        )
        saved = merge_state_path(self.rundir)
        if saved.exists():
            merger.load_state_dict(torch.load(saved, weights_only=False), healed=False)
        else:
            start = load_model(checkpoint_dir(self.rundir.checkpoints, 0), "float32")
            state = merger.state_dict()
            state["global_params"] = [p.detach().clone() for p in start.parameters() if p.requires_grad]
            merger.load_state_dict(state, healed=False)
        self.merger = merger
        return merger

    def __call__(self, step: int, model: torch.nn.Module) -> dict[str, float] | None:
        """Merge at merge steps; the merge's figures go into the metrics (islands/...) of the step it lands
        after, from where a swarm trainer's dashboard shows them. With `overlap_steps` a round launched after
        step s lands after the first step that finds it done, at the latest after step s + overlap_steps, and
        before any later launch; the last step's merge blocks."""
        merger = self.merger
        assert merger is not None, "attach() the trainer's model before the first step"
        fragment = merging_fragment(step, self.settings.merge_every, self.settings.fragments)
        figures = None
        pending = self.pending
        if pending is not None and (
            pending.done()
            or step >= pending.step + self.settings.overlap_steps
            or fragment is not None
            or step >= self.last_step
        ):
            figures = self._record(merger.finish(pending))
            self.pending = None
        if fragment is None:
            return figures
        background = self.settings.overlap_steps > 0 and step < self.last_step
        launched = merger.launch(step, fragment, background=background)
        if background:
            self.pending = launched
            return figures
        return self._record(merger.finish(launched))

    def _record(self, record: MergeRecord) -> dict[str, float]:
        """A finished round: the merge state saved when committed, a line of merges.jsonl, the log, metrics."""
        merger = self.merger
        assert merger is not None
        if record.committed:
            tmp = merge_state_path(self.rundir).with_suffix(f".{os.getpid()}.tmp")
            torch.save(merger.state_dict(), tmp)
            os.replace(tmp, merge_state_path(self.rundir))
        with merges_log(self.rundir).open("a") as f:
            f.write(json.dumps(record.as_dict()) + "\n")
        log.info(
            "merge of fragment %d at step %d: round %d, %d participants (%d contributing, %d dropped), %d bytes, "
            "%.2f s (%.2f s blocking), committed %s",
            record.fragment,
            record.step,
            record.round,
            record.participants,
            record.contributors,
            record.dropped,
            record.wire_bytes,
            record.seconds,
            record.blocked_seconds,
            record.committed,
        )
        return merge_metrics(record, self.communicator.island, self.settings.count)


def merge_metrics(record: MergeRecord, island: int, islands: int) -> dict[str, float]:
    """A merge as trainer metrics: this island, the islands configured, and the merge's own figures."""
    figures = {"island": island, "islands": islands, **record.as_dict()}
    figures.pop("step")  # the record's step is the metrics record's own
    figures.pop("drops")  # words, for merges.jsonl and the log; the count is `dropped`
    return {f"{ISLANDS_PREFIX}{name}": float(value) for name, value in figures.items()}


@dataclass
class IslandQuorum:
    """An island's membership of the islands' torchft quorum: the manager, the communicator over its group,
    the transport peers heal through, and the store the manager talks to (held for as long as it runs)."""

    manager: Manager
    communicator: QuorumCommunicator
    transport: WeightsOnlyHTTPTransport
    store: object

    def serve(self, merger: IslandMerger) -> None:
        """Heal from peers and let peers heal from this island, through `merger`'s state."""
        self.transport.max_bytes = merger.heal_bytes_bound()
        self.manager.register_state_dict_fn("islands", merger.heal_from_peer, merger.state_dict)


def join_quorum(
    settings: IslandsConfig, island: int, lighthouse: str, host: str = "127.0.0.1"
) -> IslandQuorum:
    """Island `island`'s replica of the quorum: a stable replica id, so a restarted island is the same member
    coming back; its collectives in a child process unless `process_group` says otherwise. Peers reach its
    store, manager and state at `host`; gloo picks its interface by GLOO_SOCKET_IFNAME where that is set."""
    # Imported here: torchft is the optional `elastic` extra.
    from torchft import ProcessGroupGloo
    from torchft.process_group import ProcessGroupBabyGloo

    from swarmrl.islands.heal_transport import WeightsOnlyHTTPTransport

    collective = timedelta(seconds=settings.collective_timeout_s)
    if settings.process_group == "baby_gloo":
        group = ProcessGroupBabyGloo(timeout=collective + timedelta(seconds=settings.process_group_start_s))
    else:
        group = ProcessGroupGloo(timeout=collective)
    transport = WeightsOnlyHTTPTransport(timeout=collective, host=host)
    manager, store = replica_manager(
        group,
        replica_id=f"island_{island}",
        lighthouse_addr=lighthouse,
        min_replica_size=1,
        use_async_quorum=False,
        timeout=collective,
        quorum_timeout=timedelta(seconds=settings.join_timeout_s + 4 * settings.heartbeat_timeout_s),
        checkpoint_transport=transport,
        host=host,
    )
    communicator = QuorumCommunicator(manager, group, island, settings.count, collective)
    return IslandQuorum(manager, communicator, transport, store)


def island_trainer_role(
    run_dir: Path,
    island: int,
    lighthouse: str,
    *,
    threads: int = 1,
    coordinator_url: str | None = None,
    key: Path | None = None,
    origin: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
) -> int:
    """Train island `island` of a run whose `[islands]` section says how to merge; returns the last step.
    With `coordinator_url` the island is a swarm's trainer: the merge runs before a step's checkpoint is saved
    and published, so what its shardcast origin serves at a merge step is the merged policy."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("an island's trainer is one process; shard within an island is not supported")
    torch.set_num_threads(threads)
    config = load_run_config(run_dir)
    settings: IslandsConfig = config.islands
    quorum = join_quorum(settings, island, lighthouse, host)
    hook = MergeHook(RunDir(run_dir), settings, quorum.communicator, config.trainer.steps)

    def after_step(step: int, model: torch.nn.Module) -> dict[str, float] | None:
        if hook.merger is None:
            quorum.serve(hook.attach(model))
        return hook(step, model)

    try:
        return trainer_role(
            run_dir,
            threads=threads,
            coordinator_url=coordinator_url,
            key=key,
            origin=origin,
            after_step=after_step,
        )
    finally:
        quorum.communicator.close()
