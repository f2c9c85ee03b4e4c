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
from dataclasses import dataclass
from pathlib import Path

import torch

from swarmrl.configs import RunConfig
from swarmrl.configs.contract import ContractSection
from swarmrl.configs.engine import EngineConfig
from swarmrl.coordinator.api import (
    PoolTicket,
    PoolTicketChallenge,
    WorkLease,
    WorkUnitInfo,
    solve_pool_ticket,
)
from swarmrl.coordinator.client import NodeClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.pack_client import community_tasks
from swarmrl.coordinator.transport import SHORT_RETRY, node_retry
from swarmrl.devices import hardware_of, resolve_device
from swarmrl.generation.batch import write_batch
from swarmrl.identity import Identity
from swarmrl.inference.engine import InferenceEngine, SamplingParams
from swarmrl.inference.factory import build_engine, engine_model
from swarmrl.models.adapter import fetch_base
from swarmrl.models.lm_types import CausalLM
from swarmrl.models.prompting import PromptFormat, prompt_format
from swarmrl.models.tokenizer_snapshot import worker_tokenizer
from swarmrl.node_metrics import LabelledCounter, RoleCollector, serve_metrics
from swarmrl.retry import Notices
from swarmrl.rollouts.assignment import BatchSpec
from swarmrl.rollouts.checks import completion_tokens
from swarmrl.rundir import write_json_atomic, write_text_atomic
from swarmrl.shardcast.client import local_versions
from swarmrl.shardcast.errors import ShardcastError
from swarmrl.steps import step_dir_name
from swarmrl.tasks.packs.community import CommunityTasks
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.task import TaskSource
from swarmrl.worker.feed import NodeOptions, PolicyFeed, start_policy_feed

log = logging.getLogger(__name__)

# Refusals after which this node may not carry on in the run.
_FATAL = {"banned", "unknown_run", "poor_standing"}
# Refusals an honest node can meet (missed heartbeats while starved of CPU, a coordinator restart): join again.
_REJOIN = {"ejected", "not_member"}
# Most poll intervals between lease requests while the step is full; also how long the coordinator may hold
# one for room (the node hears of a step opening at once, not at its next poll).
MAX_BACKOFF = 4
PREFETCH_JOIN_S = 15.0  # how long a stopping node lets a download in flight finish


class NodeEjected(Exception):
    """The coordinator banned or ejected this node."""


class Heartbeat(threading.Thread):
    """Beats every `interval` seconds with its own client; remembers the last answer or the fatal refusal."""

    def __init__(
        self, url: str, identity: Identity, run_id: str, contract: ContractSection, stop: threading.Event
    ) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.client = NodeClient.at(url, identity, retry=SHORT_RETRY, stop=stop)
        self.run_id, self.contract, self.stop = run_id, contract, stop
        self.policy_step: int | None = None
        self.current_step: int | None = None  # the run's step, as of the last answer
        self.interval = 1.0
        self.fatal: CoordinatorError | None = None

    def _rejoin(self) -> None:
        try:
            self.client.join(self.run_id, self.contract)
        except CoordinatorError as exc:
            if exc.kind in _FATAL:
                self.fatal = exc

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                ack = self.client.heartbeat(self.run_id, self.policy_step)
                self.interval, self.current_step = ack.next_heartbeat_s, ack.current_step
            except CoordinatorError as exc:
                if exc.kind in _FATAL:
                    self.fatal = exc
                    return
                log.warning("heartbeat failed: %s", exc)
                if exc.kind in _REJOIN:
                    self._rejoin()
            self.stop.wait(self.interval)


def worth_waiting(held: int, ceiling: int, async_level: int, fetching: int | None) -> bool:
    """Whether a unit of step `ceiling` should wait for the version being downloaded rather than generate with
    `held`: when `held` is the oldest policy the window allows, its file is refused as stale should it be
    read by the next step (a late file is), while a newer one in flight would keep it usable."""
    at_edge = async_level > 0 and held <= ceiling - async_level
    return at_edge and fetching is not None and held < fetching <= ceiling


def refusal_pause(poll_seconds: float, full_streak: int, waited_s: float, wait_s: float) -> float:
    """Seconds before the next lease request after a refusal, `full_streak` of them in a row for full steps: none
    when the coordinator held the request for room all the `wait_s` it asked (the coordinator did the waiting),
    else the poll interval doubled per refusal up to MAX_BACKOFF intervals, less the `waited_s` it took."""
    if wait_s > 0 and waited_s >= wait_s:
        return 0.0
    backoff = poll_seconds * min(MAX_BACKOFF, 2 ** max(0, full_streak - 1))
    return max(0.0, backoff - waited_s)


def left_window(step: int, opened: int | None, async_level: int) -> bool:
    """Whether a unit of `step` has left the async window once the run has opened step `opened`: its file
    would be refused as stale, so generating it is wasted."""
    return opened is not None and step < opened - async_level


def can_finish(expires_at: float, now: float, unit_seconds: float) -> bool:
    """Whether a unit started now is likely submitted before its deadline (a held unit given back to a worker
    that restarted may have too little of its lease left)."""
    return expires_at - now >= unit_seconds


class Policy:
    """The newest checkpoint announced by the relays, installed under `<work>/checkpoints` and loaded once.

    The feed's thread (`Prefetch`, started before this module is imported) installs each version as soon as
    a relay announces it, so the broadcast overlaps generation; a unit then loads the newest installed version
    at most its step, and downloads in the foreground only when none installed is recent enough (within
    `async_level` of the unit's step).
    The first checkpoint also gives the tokenizer, hence the prompt format and the tokens generation stops at;
    a restarted node reads it from the snapshot its first start wrote, without importing transformers.
    """

    def __init__(
        self, options: NodeOptions, feed: PolicyFeed, config: RunConfig, device: torch.device
    ) -> None:
        self.options, self.device = options, device
        self.async_level = feed.run.async_level
        self.dtype, self.engine_config, self.prompt_settings = (
            config.model.dtype,
            config.engine,
            config.prompt,
        )
        self.fetcher, self.prefetch = feed.fetcher, feed.prefetch
        self.root = self.fetcher.dest_root
        self.engine: InferenceEngine | None = None
        self.prompts: PromptFormat | None = None
        self._in_use: int | None = None  # the loaded version, held against pruning

    @property
    def step(self) -> int | None:
        return self.engine.policy_step if self.engine is not None else None

    def newest(self) -> int | None:
        """The newest version this node holds: loaded, or installed and loaded by the next unit that may use it."""
        held = local_versions(self.root)[-1:] + ([] if self.step is None else [self.step])
        return max(held, default=None)

    def load_first(self, stop: threading.Event) -> None:
        """Wait until a first version is installed and load it: a node asks for work only once it can do it,
        so a lease's deadline is not spent downloading its first policy and building its engine."""
        while self.engine is None and not stop.is_set():
            held = local_versions(self.root)
            if held:
                self.refresh(held[-1])
            else:
                stop.wait(0.2)

    def _installed(self, ceiling: int) -> tuple[int, Path] | None:
        """The newest version installed at most `ceiling` if it is recent enough for a unit of that step."""
        held = [v for v in local_versions(self.root) if v <= ceiling]
        if not held or held[-1] < ceiling - self.async_level:
            return None
        return held[-1], self.root / step_dir_name(held[-1])

    def refresh(self, ceiling: int, patience_until: float = 0.0) -> None:
        """Load the newest policy whose signed manifest verifies, at most `ceiling` (the coordinator's step);
        until `patience_until` (wall clock), wait for a download in flight that `worth_waiting` says is."""
        found = self._installed(ceiling)
        while (
            found is not None
            and time.time() < patience_until
            and worth_waiting(found[0], ceiling, self.async_level, self.prefetch.fetching)
        ):
            self.options.stop.wait(0.1)
            found = self._installed(ceiling)
        if found is None:
            try:
                found = self.fetcher.refresh(ceiling)
            except ShardcastError as exc:
                log.warning("could not fetch a policy up to step %d: %s", ceiling, exc)
                return
        if found is None or (self.engine is not None and found[0] <= self.engine.policy_step):
            return
        newest, path = found
        # Held from before its files are read until the next version replaces it: the prefetch thread's
        # pruning never deletes it meanwhile (issue 57: a slow start lost the version it was loading).
        self.fetcher.holds.hold(newest)
        loaded = False
        try:
            if newest not in local_versions(self.root):  # pruned between the listing and the hold: pick again
                log.info("policy step %d was pruned before it could be loaded", newest)
                return
            loaded = self._load_version(newest, path)
        finally:
            self._settle_hold(newest, loaded)

    def _load_version(self, newest: int, path: Path) -> bool:
        try:
            fetch_base(path, self.fetcher.fetch, self.fetcher.config.pinned_versions)
        except ShardcastError as exc:
            log.warning("policy step %d is an adapter whose base could not be fetched: %s", newest, exc)
            return False
        if self.prompts is None:
            tokenizer = worker_tokenizer(path, self.options.work_dir / "cache", self.prompt_settings)
            self.prompts = prompt_format(tokenizer, self.prompt_settings)
        if self.engine is not None and self.options.edit_model is None:
            self.engine.load_weights(path, policy_step=newest)
        else:
            self.engine = self._build(self.engine_config, path, newest)
        log.info("policy step %d loaded", newest)
        return True

    def _settle_hold(self, version: int, loaded: bool) -> None:
        """Keep the hold on the version now in use and release the one it replaced (or `version`, not loaded)."""
        released = self._in_use if loaded else version
        if loaded:
            self._in_use = version
        if released is not None:
            self.fetcher.holds.release(released)

    def _build(self, engine_config: EngineConfig, path: Path, step: int) -> InferenceEngine:
        assert self.prompts is not None
        return build_engine(
            engine_config, self._load(path), eos_token_id=self.prompts.stop_token_ids, policy_step=step
        )

    def _load(self, path: Path) -> torch.nn.Module:
        model: CausalLM = engine_model(self.engine_config, path, self.dtype, self.device)
        if self.options.edit_model is not None:
            self.options.edit_model(model)
        return model.eval()


def run_node(config: RunConfig, options: NodeOptions, feed: PolicyFeed | None = None) -> int:
    """Lease, generate and submit until stopped, the run drains, or `max_batches`; returns submits accepted.
    `feed`: policies already being installed (`swarmrl worker` starts them before importing this module)."""
    feed = feed or start_policy_feed(config, options)
    node, metrics = None, None
    try:
        node = WorkerNode.assemble(config, options, feed)
        metrics = serve_metrics(
            config.metrics, worker_collector(node.log_book, node.policy), options.work_dir
        )
        node.solve_pool_ticket_ahead()
        node.policy.load_first(options.stop)
        write_text_atomic(options.work_dir / "ready_at", f"{time.time()}\n")  # from now on it asks for work
        while not options.stop.is_set() and not node.done:
            if node.heartbeat.fatal is not None:
                raise NodeEjected(str(node.heartbeat.fatal))
            lease = node.lease()
            if lease is None:
                continue
            for unit in lease.units:
                if options.stop.is_set() or node.done or not node.answer(unit, lease.unit_seconds):
                    break
    except CoordinatorError as exc:
        # A ban can land between any two calls (leasing, joining again), not only on a submit.
        if exc.kind in _FATAL:
            raise NodeEjected(str(exc)) from exc
        raise
    finally:
        options.stop.set()
        if node is not None:
            node.client.close()
        if metrics is not None:
            metrics.close()
        feed.prefetch.join(timeout=PREFETCH_JOIN_S)
    return node.submitted


@dataclass
class WorkerNode:
    """A swarm worker's parts, put together in one place (`assemble`), and its two moves: lease, answer."""

    config: RunConfig
    options: NodeOptions
    identity: Identity
    client: NodeClient
    async_level: int  # the run's: how far behind a unit's step the policy may be
    heartbeat: Heartbeat
    policy: Policy
    tasks: CommunityTasks  # the run's own tasks, or a community pack's rows, unit by unit (the step's mix)
    params: SamplingParams
    log_book: WorkLog
    notices: Notices  # a refusal that repeats is said once, until work goes through again
    submitted: int = 0
    draining: bool = False
    full_streak: int = 0  # lease refusals in a row for a full step: back off, a thousand nodes ask
    pool_ticket: PoolTicket | None = None  # solved for the next unit of a contested unproven pool
    ticket_ahead: threading.Thread | None = None  # solving one while the first policy loads

    @classmethod
    def assemble(cls, config: RunConfig, options: NodeOptions, feed: PolicyFeed) -> WorkerNode:
        """Register and join the run, start beating, and build what generation needs (the policy comes from
        the relays, installed by `feed` as each version is announced). The client retries a coordinator that
        is down or rate limiting for `swarm.coordinator_retry_s`, honouring Retry-After."""
        torch.set_num_threads(config.worker.torch_threads)
        device = resolve_device(config.worker.device)  # a missing GPU is refused before the node registers
        identity = Identity.load_or_create(options.key)
        retry = node_retry(config.swarm.coordinator_retry_s)
        client = NodeClient.at(options.coordinator_url, identity, retry=retry, stop=options.stop)
        client.register(hardware_of(device, config.worker.torch_threads))
        client.join(options.run_id, config.contract)  # another contract than the run's is refused here
        heartbeat = Heartbeat(
            options.coordinator_url, identity, options.run_id, config.contract, options.stop
        )
        heartbeat.start()
        params = SamplingParams(
            max_new_tokens=config.contract.max_new_tokens,
            temperature=config.contract.temperature,
            top_p=config.contract.top_p,
        )
        return cls(
            config,
            options,
            identity,
            client,
            feed.run.async_level,
            heartbeat,
            Policy(options, feed, config, device),
            community_tasks(
                client,
                options.run_id,
                build_tasks(config.tasks, cache=options.work_dir / "cache"),
                config.tasks.community.admission.limits,
            ),
            params,
            WorkLog(options.work_dir / "work.json"),
            Notices(log),
        )

    @property
    def done(self) -> bool:
        limit = self.options.max_batches
        return self.draining or (limit is not None and self.submitted >= limit)

    def lease(self) -> WorkLease | None:
        """Units to generate, or None after waiting out a refusal (step full, not a member any more)."""
        asked = time.monotonic()
        # Held at most a backed-off poll interval: a policy installed meanwhile (the next step's units need the
        # open step's) is in the next request no later than polling would have put it there.
        wait_s = self.options.poll_seconds * MAX_BACKOFF
        ticket = self.pool_ticket
        try:
            lease = self.client.lease_work(
                self.options.run_id, policy_step=self.policy.newest(), wait_s=wait_s, pool_ticket=ticket
            )
        except CoordinatorError as exc:
            if exc.kind == "pool_ticket_needed":
                self.renew_pool_ticket(refused=ticket)
                return None
            if exc.kind == "run_draining":
                log.info("the run is draining: no more work")
                self.draining = True
                return None
            if exc.kind in _FATAL:
                raise
            if exc.kind in _REJOIN:
                self.client.join(self.options.run_id, self.config.contract)
            elif exc.kind == "step_full":
                self.log_book.count("lease_refused_step_full")  # a node that never gets work can tell why
            else:
                self.notices.failure(exc.kind, f"no lease: {exc}")
            self.full_streak = self.full_streak + 1 if exc.kind == "step_full" else 0
            pause = refusal_pause(
                self.options.poll_seconds, self.full_streak, time.monotonic() - asked, wait_s
            )
            if self.full_streak == 1 or self.full_streak % 10 == 0:
                log.info("no lease: the step is full (%d refusals in a row); asking again in %.1fs",
                         self.full_streak, pause)  # fmt: skip
            self.options.stop.wait(pause)
            return None
        self.full_streak = 0
        if lease.units:  # it bought a unit, or was not needed: the next unit's needs a new challenge
            self.pool_ticket = None
        return lease

    def solve_pool_ticket_ahead(self) -> None:
        """While its first policy loads, a node whose first unit will need a ticket solves it in a thread (which
        only hashes: the node's client closes when it stops)."""
        try:
            asked = self.client.pool_ticket_challenge(self.options.run_id)
        except CoordinatorError as exc:  # asked again, and said, when it leases
            log.debug("no pool ticket ahead: %s", exc)
            return
        if not asked.required:
            return
        self.ticket_ahead = threading.Thread(
            target=self.solve_pool_ticket, args=(asked,), name="pool-ticket", daemon=True
        )
        self.ticket_ahead.start()

    def renew_pool_ticket(self, refused: PoolTicket | None) -> None:
        """A ticket in place of `refused`: the one solved while the policy loaded, if it is another, or a new one."""
        if self.ticket_ahead is not None:
            self.ticket_ahead.join()
            self.ticket_ahead = None
            if self.pool_ticket is not None and self.pool_ticket != refused:
                return
        try:
            self.solve_pool_ticket(self.client.pool_ticket_challenge(self.options.run_id))
        except CoordinatorError as exc:
            self.notices.failure(exc.kind, f"no pool ticket: {exc}")
            self.options.stop.wait(self.options.poll_seconds)

    def solve_pool_ticket(self, asked: PoolTicketChallenge) -> None:
        """Until its first file is accepted a node shares the unproven pool with every fresh key; while keys
        squat on it, each unit of it costs a proof of work (seconds of one core, once per unit). Only hashes:
        it may run in a thread while the node stops and closes its client."""
        started = time.monotonic()
        self.pool_ticket = solve_pool_ticket(self.options.run_id, self.client.node_id, asked)
        self.log_book.count("pool_tickets_solved")
        log.info("the pool for nodes without accepted work is contested: solved its ticket in %.1fs",
                 time.monotonic() - started)  # fmt: skip

    def answer(self, unit: WorkUnitInfo, unit_seconds: float) -> bool:
        """Generate, sign, upload and submit one unit; False when the rest of the lease must wait (no policy
        for this unit yet: lease again, retry). `unit_seconds`: the coordinator's estimate of this node's time
        per unit, lease to submission."""
        options, config = self.options, self.config
        if unit.expires_at < self.client.clock():
            self.log_book.count("lapsed_before_start")
            return True
        leased_at = time.time()
        # Half of what is left of the lease may go to waiting for a fresher policy in flight.
        self.policy.refresh(unit.step, patience_until=leased_at + (unit.expires_at - self.client.clock()) / 2)
        if left_window(unit.step, self._opened_step(), self.async_level):
            self.log_book.count("stale_before_start")  # a held unit outlived a restart or a long wait
            return True
        if not can_finish(unit.expires_at, self.client.clock(), unit_seconds):
            self.log_book.count("too_late_to_start")  # its file would land after the deadline and be refused
            return True
        engine = self.policy.engine
        if engine is None or not (unit.step - self.async_level <= engine.policy_step <= unit.step):
            options.stop.wait(options.poll_seconds)
            return False
        self.heartbeat.policy_step = self.policy.step
        contract = config.contract
        spec = BatchSpec(
            options.run_id, self.identity.node_id, unit.step, unit.batch_index, contract.prompts_per_batch,
            contract.group_size, contract.seed, unit.seed,
        )  # fmt: skip
        path = options.work_dir / "rollouts" / f"step_{unit.step}" / f"b{unit.batch_index:04d}.parquet"
        tasks = self._unit_tasks(unit)
        if tasks is None:
            return True
        started, started_at = time.monotonic(), time.time()
        assert self.policy.prompts is not None  # set before its first engine
        tokenizer = self.policy.prompts.tokenizer
        rows = write_batch(engine, spec, tasks, tokenizer, config, self.params, path, self.identity)
        self.log_book.generated(len(rows))
        if options.after_generate is not None:
            options.after_generate(time.monotonic() - started, options.stop)
        timing: dict[str, float] = {
            "step": unit.step,
            "batch_index": unit.batch_index,
            "policy_step": engine.policy_step,
        }
        timing.update(leased=leased_at, started=started_at, generated=time.time())
        self._submit(unit, path, rows, timing)
        return True

    def _unit_tasks(self, unit: WorkUnitInfo) -> TaskSource | None:
        """The unit's tasks: the run's own or a community pack's, as the step's mix says; None when the pack
        cannot be had (this unit is given up: its lease lapses and is leased again)."""
        try:
            return self.tasks.unit(unit.step, unit.batch_index).tasks
        except (CoordinatorError, PackError) as exc:
            if isinstance(exc, CoordinatorError) and exc.kind in _FATAL:
                raise
            self.notices.failure("pack_tasks", f"step {unit.step} batch {unit.batch_index}: no tasks: {exc}")
            self.log_book.count("unit_tasks_unavailable")
            return None

    def _opened_step(self) -> int | None:
        """The newest step the run is known to have opened: the last heartbeat's, or the one before the newest
        policy installed (the trainer publishes version k just before it opens step k)."""
        installed = local_versions(self.policy.root)
        known = [
            s
            for s in (self.heartbeat.current_step, installed[-1] - 1 if installed else None)
            if s is not None
        ]
        return max(known, default=None)

    def _submit(self, unit: WorkUnitInfo, path: Path, rows: list, timing: dict) -> None:
        """Upload and submit one unit's file; a refusal costs that unit only (the client already retried what
        is worth retrying: the coordinator down or rate limiting, honouring its Retry-After)."""
        tokens = completion_tokens(rows)
        try:
            self.client.upload_and_submit(
                self.options.run_id, unit.step, unit.batch_index, path, rows=len(rows), tokens=tokens
            )
        except CoordinatorError as exc:
            if exc.kind in _FATAL:
                raise
            self.notices.failure(exc.kind, f"step {unit.step} batch {unit.batch_index} not submitted: {exc}")
            self.log_book.count(f"refused_{exc.kind}")
            self.log_book.unit(**timing, submitted=time.time(), outcome=exc.kind)
            if exc.kind in _REJOIN:
                self.client.join(self.options.run_id, self.config.contract)
            return
        self.notices.success()
        self.submitted += 1
        self.log_book.count("submitted")
        self.log_book.unit(**timing, submitted=time.time(), outcome="submitted")


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
        self._lock = threading.Lock()  # a pool ticket solved in a thread counts too

    def generated(self, rows: int) -> None:
        with self._lock:
            self.counts["generated_files"] += 1
            self.counts["generated_rows"] += rows
            self._save()

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1
            self._save()

    def unit(self, **timing: int | float | str | None) -> None:
        """One line per unit generated, in `units.jsonl` beside `work.json`: its step and batch, the policy it
        was generated with, and when (wall clock) it started, was generated and was submitted or refused."""
        with self.path.with_name("units.jsonl").open("a") as lines:
            lines.write(json.dumps(timing) + "\n")

    def _save(self) -> None:
        write_json_atomic(self.path, dict(self.counts))
