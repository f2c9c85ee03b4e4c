"""A worker's options and its feed of policies: what a node starts before it imports its inference stack.

Importing torch, transformers and the engine costs a starting node seconds of CPU (tens of seconds on a loaded
machine), and a restarted node is back to work only once it also holds a policy. Nothing here imports torch, so
`swarmrl worker` reads the run (its trainer key) and starts installing the newest policy version from the
relays first; the download then runs while the rest of the node is imported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmrl.configs import RunConfig
from swarmrl.coordinator.api import RunState
from swarmrl.coordinator.client import PublicReads
from swarmrl.coordinator.transport import node_retry
from swarmrl.shardcast.client import CheckpointFetcher
from swarmrl.shardcast.prefetch import Prefetch
from swarmrl.steps import BASE_STEP


@dataclass
class NodeOptions:
    coordinator_url: str
    run_id: str
    key: Path
    relays: list[str]
    work_dir: Path
    max_batches: int | None = None
    poll_seconds: float = 0.5
    stop: threading.Event = field(default_factory=threading.Event)
    # Seams for the lab's misbehaving workers (lab/swarmrl_lab/cheat_worker.py); a node leaves them unset.
    # edit_model changes each policy's model once loaded (its engine is then built anew for every policy);
    # after_generate is told the seconds each unit took to generate, before the unit is submitted.
    edit_model: Callable[[Any], None] | None = None
    after_generate: Callable[[float, threading.Event], None] | None = None


@dataclass
class PolicyFeed:
    """The run as read at start-up, the fetcher of its policies, and the thread installing each new version."""

    run: RunState
    fetcher: CheckpointFetcher
    prefetch: Prefetch


def policy_fetcher(config: RunConfig, options: NodeOptions, trainer_key: str) -> CheckpointFetcher:
    """Fetches from the node's relays, every byte checked against the trainer's key; a LoRA run's base is
    pinned from the start: fetched with step 0 and kept, adapters merge onto it."""
    pinned = [BASE_STEP] if config.trainer.lora.enabled else []
    return CheckpointFetcher(
        options.relays,
        trainer_key,
        options.work_dir / "checkpoints",
        config.shardcast.client.pinning(pinned),
        options.run_id,
    )


def start_policy_feed(config: RunConfig, options: NodeOptions) -> PolicyFeed:
    """Read the run (unsigned: no identity needed yet) and start installing each version the relays announce.
    The coordinator is retried for `swarm.coordinator_retry_s`, as every call of the node is."""
    with PublicReads.at(
        options.coordinator_url, retry=node_retry(config.swarm.coordinator_retry_s), stop=options.stop
    ) as reads:
        run = reads.run_state(options.run_id)
    fetcher = policy_fetcher(config, options, run.trainer_public_key)
    prefetch = Prefetch(fetcher, options.stop)
    prefetch.start()
    return PolicyFeed(run, fetcher, prefetch)
