"""`swarmrl worker --coordinator URL`: a permissionless inference node of a swarm.

register → join → heartbeat (a background thread) → loop: lease work from the coordinator (units of the open
step, each with its seed and deadline; refused before any compute when the step has all it needs), fetch the
newest checkpoint through shardcast (every byte checked against the trainer's signed manifest), generate each
unit with TOPLOC proofs, sign the file, upload it, submit it.

The client retries what is worth retrying (the coordinator down, 5xx, 429) with jittered back-off that honours
Retry-After, and says so once; a refused submission only costs that unit.
A ban, an ejection or lost standing ends the node with `NodeEjected`; a draining run ends it normally.
`<work>/work.json` counts what this node generated and what became of it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from swarmrl.configs import RunConfig
from swarmrl.configs.engine import EngineConfig
from swarmrl.coordinator.api import UnitInfo, WorkLease
from swarmrl.coordinator.client import NodeClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.transport import SHORT_RETRY, node_retry
from swarmrl.devices import hardware_of, resolve_device
from swarmrl.generation.batch import write_batch
from swarmrl.identity import Identity
from swarmrl.inference.engine import InferenceEngine, SamplingParams
from swarmrl.inference.factory import build_engine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.adapter import BASE_STEP, fetch_base
from swarmrl.models.prompting import PromptFormat, prompt_format
from swarmrl.node_metrics import LabelledCounter, RoleCollector, serve_metrics
from swarmrl.retry import Notices
from swarmrl.rollouts.assignment import BatchSpec
from swarmrl.rundir import write_json_atomic
from swarmrl.shardcast.client import CheckpointFetcher
from swarmrl.shardcast.errors import ShardcastError
from swarmrl.tasks.registry import build_tasks

log = logging.getLogger(__name__)

Cheat = Literal["half-layers"]
# Refusals after which this node may not carry on in the run.
_FATAL = {"banned", "unknown_run", "poor_standing"}
# Refusals an honest node can meet (missed heartbeats while starved of CPU, a coordinator restart): join again.
_REJOIN = {"ejected", "not_member"}
MAX_BACKOFF = 4  # most poll intervals between lease requests while the step is full


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
    slowdown: float = 1.0  # > 1 simulates a slower machine: each unit takes this many times as long
    stop: threading.Event = field(default_factory=threading.Event)


class Heartbeat(threading.Thread):
    """Beats every `interval` seconds with its own client; remembers the last answer or the fatal refusal."""

    def __init__(self, url: str, identity: Identity, run_id: str, stop: threading.Event) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.client = NodeClient.at(url, identity, retry=SHORT_RETRY, stop=stop)
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
    """The newest checkpoint announced by the relays, installed under `<work>/checkpoints` and loaded once.

    The first checkpoint also gives the tokenizer, hence the prompt format and the tokens generation stops at.
    """

    def __init__(
        self, options: NodeOptions, trainer_key: str, config: RunConfig, device: torch.device
    ) -> None:
        self.options, self.trainer_key, self.device = options, trainer_key, device
        self.dtype, self.engine_config, self.prompt_settings = (
            config.model.dtype,
            config.engine,
            config.prompt,
        )
        self.root = options.work_dir / "checkpoints"
        self.engine: InferenceEngine | None = None
        self.prompts: PromptFormat | None = None
        # A LoRA run's base is pinned from the start: fetched with step 0 and kept, adapters merge onto it.
        pinned = [BASE_STEP] if config.trainer.lora.enabled else []
        self.fetcher = CheckpointFetcher(
            options.relays,
            trainer_key,
            self.root,
            config.shardcast.client.pinning(pinned),
            options.run_id,
        )

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
        try:
            fetch_base(path, self.fetcher.fetch, self.fetcher.config.pinned_versions)
        except ShardcastError as exc:
            log.warning("policy step %d is an adapter whose base could not be fetched: %s", newest, exc)
            return
        if self.prompts is None:
            self.prompts = prompt_format(load_tokenizer(path), self.prompt_settings)
        if self.engine is not None and self.options.cheat is None:
            self.engine.load_weights(path, policy_step=newest)
        else:
            self.engine = self._build(self.engine_config, path, newest)
        log.info("policy step %d loaded", newest)

    def _build(self, engine_config: EngineConfig, path: Path, step: int) -> InferenceEngine:
        assert self.prompts is not None
        return build_engine(
            engine_config, self._load(path), eos_token_id=self.prompts.stop_token_ids, policy_step=step
        )

    def _load(self, path: Path) -> torch.nn.Module:
        model = load_model(path, self.dtype, device=str(self.device))
        if self.options.cheat == "half-layers":
            # Saves half the compute and claims the full model's work: TOPLOC must see the difference.
            keep = max(1, model.config.num_hidden_layers // 2)
            model.model.layers = model.model.layers[:keep]
            model.config.num_hidden_layers = keep
        return model.eval()


def run_node(config: RunConfig, options: NodeOptions) -> int:
    """Lease, generate and submit until stopped, the run drains, or `max_batches`; returns submits accepted."""
    torch.set_num_threads(config.worker.torch_threads)
    device = resolve_device(config.worker.device)  # a missing GPU is refused before the node registers
    identity = Identity.load_or_create(options.key)
    retry = node_retry(config.swarm.coordinator_retry_s)
    client = NodeClient.at(options.coordinator_url, identity, retry=retry, stop=options.stop)
    metrics = None
    try:
        client.register(hardware_of(device, config.worker.torch_threads))
        client.join(options.run_id)
        run = client.reads.run_state(options.run_id)
        heartbeat = Heartbeat(options.coordinator_url, identity, options.run_id, options.stop)
        heartbeat.start()
        node = NodeLoop(config, options, client, Policy(options, run.trainer_public_key, config, device))
        metrics = serve_metrics(
            config.metrics, worker_collector(node.log_book, node.policy), options.work_dir
        )
        return node.run(heartbeat, run.async_level)
    except CoordinatorError as exc:
        # A ban can land between any two calls (leasing, joining again), not only on a submit.
        if exc.kind in _FATAL:
            raise NodeEjected(str(exc)) from exc
        raise
    finally:
        options.stop.set()
        client.close()
        if metrics is not None:
            metrics.close()


class NodeLoop:
    """The node's work: lease units, generate each with a fresh enough policy, upload and submit its file."""

    def __init__(self, config: RunConfig, options: NodeOptions, client: NodeClient, policy: Policy) -> None:
        self.config, self.options, self.client, self.policy = config, options, client, policy
        self.tasks = build_tasks(config.tasks)
        self.params = SamplingParams(
            max_new_tokens=config.worker.max_new_tokens,
            temperature=config.worker.temperature,
            top_p=config.worker.top_p,
        )
        self.log_book = WorkLog(options.work_dir / "work.json")
        self.notices = Notices(log)  # a refusal that repeats is said once, until work goes through again
        self.submitted = 0
        self.full_streak = 0  # lease refusals in a row for a full step: back off, a thousand nodes ask

    def done(self) -> bool:
        limit = self.options.max_batches
        return self.options.stop.is_set() or (limit is not None and self.submitted >= limit)

    def run(self, heartbeat: Heartbeat, async_level: int) -> int:
        while not self.done():
            if heartbeat.fatal is not None:
                raise NodeEjected(str(heartbeat.fatal))
            lease = self.lease()
            for unit in lease.units if lease is not None else ():
                if self.done():
                    break
                if unit.expires_at < self.client.clock():
                    self.log_book.count("lapsed_before_start")
                    continue
                self.policy.refresh(ceiling=unit.step)
                engine = self.policy.engine
                if engine is None or not unit.step - async_level <= engine.policy_step <= unit.step:
                    self.options.stop.wait(self.options.poll_seconds)  # no policy for it yet: lease again
                    break
                heartbeat.policy_step = self.policy.step
                self.submit(unit, *self.generate(unit))
        return self.submitted

    def lease(self) -> WorkLease | None:
        """The units to work on, or None after waiting out a refusal (step full, not a member any more)."""
        try:
            lease = self.client.lease_work(self.options.run_id)
        except CoordinatorError as exc:
            if exc.kind == "run_draining":
                log.info("the run is draining: no more work")
                self.options.stop.set()
                return None
            if exc.kind in _FATAL:
                raise
            if exc.kind in _REJOIN:
                self.client.join(self.options.run_id)
            elif exc.kind != "step_full":
                self.notices.failure(exc.kind, f"no lease: {exc}")
            self.full_streak = self.full_streak + 1 if exc.kind == "step_full" else 0
            self.options.stop.wait(
                self.options.poll_seconds * min(MAX_BACKOFF, 2 ** max(0, self.full_streak - 1))
            )
            return None
        self.full_streak = 0
        return lease

    def generate(self, unit: UnitInfo) -> tuple[Path, list]:
        options, engine = self.options, self.policy.engine
        spec = BatchSpec(
            options.run_id,
            self.client.node_id,
            unit.step,
            unit.batch_index,
            self.config.worker.prompts_per_batch,
            self.config.worker.group_size,
            self.config.run.seed,
            unit.seed,
        )
        path = options.work_dir / "rollouts" / f"step_{unit.step}" / f"b{unit.batch_index:04d}.parquet"
        started = time.monotonic()
        tokenizer = self.policy.prompts.tokenizer
        identity = self.client.transport.identity
        rows = write_batch(engine, spec, self.tasks, tokenizer, self.config, self.params, path, identity)
        self.log_book.generated(len(rows))
        if options.slowdown > 1.0:
            options.stop.wait((options.slowdown - 1.0) * (time.monotonic() - started))
        return path, rows

    def submit(self, unit: UnitInfo, path: Path, rows: list) -> None:
        """Upload and submit one unit's file; a refusal costs that unit only (the client already retried
        what is worth retrying: the coordinator down or rate limiting, honouring its Retry-After)."""
        tokens = sum(len(r.completion_ids) for r in rows)
        try:
            self.client.upload_and_submit(
                self.options.run_id, unit.step, unit.batch_index, path, rows=len(rows), tokens=tokens
            )
        except CoordinatorError as exc:
            if exc.kind in _FATAL:
                raise
            self.notices.failure(exc.kind, f"step {unit.step} batch {unit.batch_index} not submitted: {exc}")
            self.log_book.count(f"refused_{exc.kind}")
            if exc.kind in _REJOIN:
                self.client.join(self.options.run_id)
            return
        self.notices.success()
        self.submitted += 1
        self.log_book.count("submitted")


def worker_collector(log_book: WorkLog, policy: Policy) -> RoleCollector:
    """`swarmrl_worker_work_total{count}` (the work log's counts) and `swarmrl_worker_policy_step`."""
    work = LabelledCounter(
        "work_total",
        "what this worker generated and what became of it, as its work.json counts it",
        ("count",),
        lambda: {(name,): value for name, value in log_book.counts.items()},
    )
    return RoleCollector("worker", [work], lambda: {"policy_step": policy.step})


class WorkLog:
    """What this node generated and what became of it, kept on disk (`work.json`) for operators and the demo."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.counts: Counter[str] = Counter(json.loads(path.read_text()) if path.exists() else {})

    def generated(self, rows: int) -> None:
        self.counts["generated_files"] += 1
        self.counts["generated_rows"] += rows
        self._save()

    def count(self, what: str) -> None:
        self.counts[what] += 1
        self._save()

    def _save(self) -> None:
        write_json_atomic(self.path, dict(self.counts))
