"""`swarmrl worker --coordinator URL`: a permissionless inference node of a swarm.

register → join → heartbeat (a background thread) → loop: read the open step from the coordinator, fetch the
newest checkpoint through shardcast (every byte checked against the trainer's signed manifest), ask for the
task seed of (step, batch index), generate with TOPLOC proofs, sign the file, upload it, submit it.

Network errors are retried with bounded back-off by the client; a refused submission (the step closed while
the batch ran) only costs that batch. A ban or ejection ends the node with `NodeEjected`.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from swarmrl.config import RunConfig
from swarmrl.coordinator.client import CoordinatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.identity import Identity
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.rundir import write_json_atomic
from swarmrl.shardcast.client import CheckpointFetcher
from swarmrl.shardcast.config import ClientConfig
from swarmrl.shardcast.errors import ShardcastError
from swarmrl.tasks.registry import build_tasks
from swarmrl.trainer.checkpoint import checkpoint_dir
from swarmrl.worker.rollout import BatchSpec, write_batch

log = logging.getLogger(__name__)

Cheat = Literal["half-layers"]
# Refusals after which this node may not carry on in the run.
_FATAL = {"banned", "unknown_run"}
# Refusals an honest node can meet (missed heartbeats while starved of CPU, a coordinator restart): join again.
_REJOIN = {"ejected", "not_member"}


class NodeEjected(Exception):
    """The coordinator banned or ejected this node."""


@dataclass
class NodeOptions:
    coordinator_url: str
    run_id: str
    key: Path
    relays: list[str]
    work_dir: Path
    cheat: Cheat | None = None
    max_batches: int | None = None
    poll_seconds: float = 0.5
    stop: threading.Event = field(default_factory=threading.Event)


class Heartbeat(threading.Thread):
    """Beats every `interval` seconds with its own client; remembers the last answer or the fatal refusal."""

    def __init__(self, url: str, identity: Identity, run_id: str, stop: threading.Event) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.client = CoordinatorClient(url, identity, max_retries=2)
        self.run_id, self.stop = run_id, stop
        self.policy_step: int | None = None
        self.interval = 1.0
        self.fatal: CoordinatorError | None = None

    def _rejoin(self) -> None:
        try:
            self.client.join(self.run_id)
        except CoordinatorError as exc:
            if exc.kind in _FATAL:
                self.fatal = exc

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                ack = self.client.heartbeat(self.run_id, self.policy_step)
                self.interval = ack.next_heartbeat_s
            except CoordinatorError as exc:
                if exc.kind in _FATAL:
                    self.fatal = exc
                    return
                log.warning("heartbeat failed: %s", exc)
                if exc.kind in _REJOIN:
                    self._rejoin()
            self.stop.wait(self.interval)


class Policy:
    """The newest checkpoint announced by the relays, installed under `<work>/checkpoints` and loaded once."""

    def __init__(self, options: NodeOptions, trainer_key: str, dtype: str) -> None:
        self.options, self.trainer_key, self.dtype = options, trainer_key, dtype
        self.root = options.work_dir / "checkpoints"
        self.engine: TorchEngine | None = None
        self.fetcher = CheckpointFetcher(options.relays, trainer_key, self.root, ClientConfig(), options.run_id)

    @property
    def step(self) -> int | None:
        return self.engine.policy_step if self.engine is not None else None

    def refresh(self, ceiling: int) -> None:
        """Load the newest policy whose signed manifest verifies, at most `ceiling` (the coordinator's step)."""
        try:
            found = self.fetcher.refresh(ceiling)
        except ShardcastError as exc:
            log.warning("could not fetch a policy up to step %d: %s", ceiling, exc)
            return
        if found is None or (self.engine is not None and found[0] <= self.engine.policy_step):
            return
        newest, path = found
        if self.engine is None:
            self.engine = TorchEngine(self._load(path), policy_step=newest)
        elif self.options.cheat is None:
            self.engine.load_weights(path, policy_step=newest)
        else:
            self.engine = TorchEngine(self._load(path), policy_step=newest)
        log.info("policy step %d loaded", newest)

    def _load(self, path: Path) -> torch.nn.Module:
        model = load_model(path, self.dtype)
        if self.options.cheat == "half-layers":
            # Saves half the compute and claims the full model's work: TOPLOC must see the difference.
            keep = max(1, model.config.num_hidden_layers // 2)
            model.model.layers = model.model.layers[:keep]
            model.config.num_hidden_layers = keep
        return model.eval()


def run_node(config: RunConfig, options: NodeOptions) -> int:
    """Produce and submit rollouts until stopped (or `max_batches`); returns the number of accepted submits."""
    torch.set_num_threads(config.worker.torch_threads)
    identity = Identity.load_or_create(options.key)
    client = CoordinatorClient(options.coordinator_url, identity, max_retries=8, max_backoff_s=4.0)
    client.register({"device": "cpu", "torch_threads": config.worker.torch_threads})
    client.join(options.run_id)
    run = client.run_state(options.run_id)
    heartbeat = Heartbeat(options.coordinator_url, identity, options.run_id, options.stop)
    heartbeat.start()
    policy = Policy(options, run.trainer_public_key, config.model.dtype)
    tasks = build_tasks(config.tasks)
    params = SamplingParams(
        max_new_tokens=config.worker.max_new_tokens,
        temperature=config.worker.temperature,
        top_p=config.worker.top_p,
    )
    counters = BatchCounters(options.work_dir / "batches.json")
    tokenizer = None
    submitted = 0
    try:
        while not options.stop.is_set():
            if heartbeat.fatal is not None:
                raise NodeEjected(str(heartbeat.fatal))
            if options.max_batches is not None and submitted >= options.max_batches:
                break
            run = client.run_state(options.run_id)
            step = run.current_step
            policy.refresh(ceiling=step)
            if policy.engine is None or policy.engine.policy_step < step - run.async_level:
                options.stop.wait(options.poll_seconds)
                continue
            heartbeat.policy_step = policy.step
            if tokenizer is None:
                tokenizer = load_tokenizer(checkpoint_dir(policy.root, policy.engine.policy_step))
            batch_index = counters.take(step)
            try:
                seed = client.task_seed(options.run_id, step, batch_index)
                spec = BatchSpec(
                    options.run_id,
                    identity.node_id,
                    step,
                    batch_index,
                    config.worker.prompts_per_batch,
                    config.worker.group_size,
                    config.run.seed,
                    seed,
                )
                path = options.work_dir / "rollouts" / f"step_{step}" / f"b{batch_index:04d}.parquet"
                rows = write_batch(policy.engine, spec, tasks, tokenizer, config, params, path, identity)
                tokens = sum(len(r.completion_ids) for r in rows)
                client.upload_and_submit(options.run_id, step, path, rows=len(rows), tokens=tokens)
                submitted += 1
            except CoordinatorError as exc:
                if exc.kind in _FATAL:
                    raise
                log.warning("step %d batch %d not submitted: %s", step, batch_index, exc)
                if exc.kind in _REJOIN:
                    client.join(options.run_id)
                options.stop.wait(options.poll_seconds)
    except CoordinatorError as exc:
        # A ban can land between any two calls (reading the step, joining again), not only on a submit.
        if exc.kind in _FATAL:
            raise NodeEjected(str(exc)) from exc
        raise
    finally:
        options.stop.set()
        client.close()
    return submitted


class BatchCounters:
    """The next batch index per step, kept on disk: a restarted node never reuses a (step, batch) seed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._next: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}

    def take(self, step: int) -> int:
        index = self._next.get(str(step), 0)
        self._next[str(step)] = index + 1
        write_json_atomic(self.path, self._next)
        return index
