"""`swarmrl worker --coordinator URL`: a permissionless inference node of a swarm.

register → join → heartbeat (a background thread) → loop: lease work from the coordinator (units of the open
step, each with its seed and deadline; refused before any compute when the step has all it needs), fetch the
newest checkpoint through shardcast (every byte checked against the trainer's signed manifest), generate each
unit with TOPLOC proofs, sign the file, upload it, submit it.

Network errors are retried with bounded back-off by the client; a refused submission only costs that unit.
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
from swarmrl.coordinator.client import CoordinatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.devices import hardware_of, resolve_device
from swarmrl.identity import Identity
from swarmrl.inference.engine import InferenceEngine, SamplingParams
from swarmrl.inference.factory import build_engine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.adapter import BASE_STEP, fetch_base
from swarmrl.models.prompting import PromptFormat, prompt_format
from swarmrl.node_metrics import LabelledCounter, RoleCollector, serve_metrics
from swarmrl.rollouts.assignment import BatchSpec
from swarmrl.rollouts.checks import completion_tokens
from swarmrl.rundir import write_json_atomic
from swarmrl.shardcast.client import CheckpointFetcher
from swarmrl.shardcast.errors import ShardcastError
from swarmrl.tasks.registry import build_tasks
from swarmrl.worker.rollout import write_batch

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
    client = CoordinatorClient(options.coordinator_url, identity, max_retries=8, max_backoff_s=4.0)
    client.register(hardware_of(device, config.worker.torch_threads))
    client.join(options.run_id)
    run = client.run_state(options.run_id)
    heartbeat = Heartbeat(options.coordinator_url, identity, options.run_id, options.stop)
    heartbeat.start()
    policy = Policy(options, run.trainer_public_key, config, device)
    tasks = build_tasks(config.tasks)
    params = SamplingParams(
        max_new_tokens=config.worker.max_new_tokens,
        temperature=config.worker.temperature,
        top_p=config.worker.top_p,
    )
    log_book = WorkLog(options.work_dir / "work.json")
    metrics = serve_metrics(config.metrics, worker_collector(log_book, policy), options.work_dir)
    submitted = 0
    full_streak = 0  # lease refusals in a row for a full step: back off, a thousand nodes ask
    try:
        while not options.stop.is_set():
            if heartbeat.fatal is not None:
                raise NodeEjected(str(heartbeat.fatal))
            if options.max_batches is not None and submitted >= options.max_batches:
                break
            try:
                lease = client.lease_work(options.run_id)
                full_streak = 0
            except CoordinatorError as exc:
                if exc.kind == "run_draining":
                    log.info("the run is draining: no more work")
                    break
                if exc.kind in _FATAL:
                    raise
                if exc.kind in _REJOIN:
                    client.join(options.run_id)
                elif exc.kind == "step_full":
                    # Counted and said once per streak: a node that never gets work can tell why.
                    log_book.count("refused_step_full")
                    if full_streak == 0:
                        log.info("no lease: %s (backing off while it lasts)", exc.detail)
                else:
                    log.warning("no lease: %s", exc)
                full_streak = full_streak + 1 if exc.kind == "step_full" else 0
                options.stop.wait(options.poll_seconds * min(MAX_BACKOFF, 2 ** max(0, full_streak - 1)))
                continue
            for unit in lease.units:
                if options.stop.is_set() or (
                    options.max_batches is not None and submitted >= options.max_batches
                ):
                    break
                if unit.expires_at < client.clock():
                    log_book.count("lapsed_before_start")
                    continue
                policy.refresh(ceiling=unit.step)
                if policy.engine is None or not (
                    unit.step - run.async_level <= policy.engine.policy_step <= unit.step
                ):
                    options.stop.wait(options.poll_seconds)  # no policy for this unit yet: lease again, retry
                    break
                heartbeat.policy_step = policy.step
                spec = BatchSpec(
                    options.run_id,
                    identity.node_id,
                    unit.step,
                    unit.batch_index,
                    config.worker.prompts_per_batch,
                    config.worker.group_size,
                    config.run.seed,
                    unit.seed,
                )
                path = (
                    options.work_dir / "rollouts" / f"step_{unit.step}" / f"b{unit.batch_index:04d}.parquet"
                )
                started = time.monotonic()
                rows = write_batch(
                    policy.engine, spec, tasks, policy.prompts.tokenizer, config, params, path, identity
                )
                log_book.generated(len(rows))
                if options.slowdown > 1.0:
                    options.stop.wait((options.slowdown - 1.0) * (time.monotonic() - started))
                try:
                    client.upload_and_submit(
                        options.run_id,
                        unit.step,
                        unit.batch_index,
                        path,
                        rows=len(rows),
                        tokens=completion_tokens(rows),
                    )
                except CoordinatorError as exc:
                    if exc.kind in _FATAL:
                        raise
                    log.warning("step %d batch %d not submitted: %s", unit.step, unit.batch_index, exc)
                    log_book.count(f"refused_{exc.kind}")
                    if exc.kind in _REJOIN:
                        client.join(options.run_id)
                    continue
                submitted += 1
                log_book.count("submitted")
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
    return submitted


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
