"""`swarmrl validator --coordinator URL`: the trusted validator of a swarm.

Takes a validation lease on the oldest pending submission (no other validator judges that file while the
lease lives; any number of validators run side by side; with none pending, the request waits at the
coordinator for the next file submitted), downloads the file (checked against the sha256 the
worker committed to), runs every check of `rollout_checks` with the policy of the file's step (fetched through
shardcast like any node) and the seed of the unit the file was leased for, and posts the verdict with a
summary of the trusted rewards. It stops when the run has drained (every submitted file judged).

Each verdict is written to `<work>/verdicts/<id>.json` before it is posted: a validator killed in between gets
its lease back after a restart and re-posts the verdict instead of judging the file again (its replay check
would call it a duplicate). Killed for good, its lease lapses and another validator takes the file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from swarmrl.configs import RunConfig
from swarmrl.configs.shardcast import ClientConfig
from swarmrl.coordinator.api import SubmissionInfo
from swarmrl.coordinator.client import ValidatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.pack_client import PackClient, community_tasks
from swarmrl.coordinator.transport import node_retry
from swarmrl.devices import hardware_of, resolve_device
from swarmrl.envs.build import env_replay
from swarmrl.identity import Identity
from swarmrl.models import load_tokenizer, policy_vocab_size
from swarmrl.models.adapter import fetch_base
from swarmrl.node_metrics import LabelledCounter, RoleCollector, serve_metrics
from swarmrl.rollouts import RolloutLimits
from swarmrl.rollouts.checks import CheckFailed, completion_tokens
from swarmrl.rollouts.pack_scoring import judge_pack_rows
from swarmrl.rundir import write_json_atomic
from swarmrl.shardcast.client import CheckpointFetcher, local_versions
from swarmrl.shardcast.prefetch import Prefetch
from swarmrl.steps import BASE_STEP
from swarmrl.tasks.packs.community import CommunityTasks
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.reward import reward_computer
from swarmrl.tasks.reward_check import check_reward_functions
from swarmrl.tasks.run_pins import adopt_local_pins, check_pins
from swarmrl.validator.packs import PackChecker, PackCheckerThread
from swarmrl.validator.rollout_checks import SeenFiles, ValidationContext, validate_file
from swarmrl.validator.service import PolicyCache

log = logging.getLogger(__name__)


# Download failures that are a verdict on the submission, by the check name the coordinator's severities use.
_UNREADABLE = {"sha256_mismatch": "upload_hash", "file_missing": "file_missing"}
# Verdicts the coordinator no longer wants: another validator decided, the node's work was voided, the lease moved.
_MOOT = {"already_decided", "voided", "lease_held"}
# Seconds a validator's prefetch waits on a relay's long poll before asking again: also how long a validator
# that has finished may wait for it to notice (a worker's prefetch waits 10 s; a validator drains and exits).
PREFETCH_POLL_S = 2.0
PREFETCH_JOIN_S = 15.0  # how long a stopping validator lets a download in flight finish
# Poll intervals the coordinator may hold a lease request while no file waits: a file is judged the moment it
# arrives, not at the next poll.
LEASE_WAIT_POLLS = 4


class ValidatorStopped(Exception):
    """Asked to stop before the validator could start."""


@dataclass
class ValidatorOptions:
    coordinator_url: str
    run_id: str
    key: Path
    relays: list[str]
    work_dir: Path
    poll_seconds: float = 0.5
    device: str = "cpu"  # where policies are loaded and the prefill recomputed: auto, cpu, cuda, cuda:N
    stop: threading.Event = field(default_factory=threading.Event)


class FetchedPolicies(PolicyCache):
    """Policy checkpoints by step, fetched through shardcast, the last few kept loaded.

    A background thread (`Prefetch`) installs each version as soon as a relay announces it, so the first file
    of a new policy does not wait for its download (over a long link, seconds); a version not installed yet is
    fetched on first use. Both go through one `CheckpointFetcher`, whose measured sources and kept-alive
    connections carry over from version to version.
    """

    def __init__(
        self,
        options: ValidatorOptions,
        trainer_key: str,
        dtype: str,
        keep: int,
        fetching: ClientConfig,
        device: torch.device,
        lora: bool = False,
    ) -> None:
        super().__init__(options.work_dir / "checkpoints", dtype, keep, device)
        # Files of any step still loaded here are judged against it: never delete one from disk first. A LoRA
        # run's base version is kept from the start: every adapter is merged onto it.
        self.pinned: list[int] = [BASE_STEP] if lora else []
        self.fetching = fetching.pinning(self.pinned).model_copy(
            update={"keep_versions": max(fetching.keep_versions, keep + 1)}
        )
        self.fetcher = CheckpointFetcher(
            options.relays, trainer_key, self.checkpoints, self.fetching, options.run_id
        )
        self._closing = threading.Event()
        self.prefetch = Prefetch(self.fetcher, self._closing, poll_s=PREFETCH_POLL_S)

    def path(self, step: int) -> Path:
        if step not in local_versions(self.checkpoints):
            self._fetch(step)
            fetch_base(super().path(step), self._fetch, self.pinned)
        return super().path(step)

    def _fetch(self, step: int) -> Path:
        return self.fetcher.fetch(step)

    def close(self) -> None:
        """Stop prefetching, letting a download in flight finish (bounded)."""
        self._closing.set()
        if self.prefetch.is_alive():
            self.prefetch.join(timeout=PREFETCH_JOIN_S)


def swarm_context(
    config: RunConfig,
    client: ValidatorClient,
    options: ValidatorOptions,
    trainer_key: str,
    device: torch.device,
    adopted_pins: bool = False,
) -> SwarmContext:
    """What the validator trusts in a swarm: its first policy fetched through relays, whose checkpoint carries
    the trainer's reward-function pins, checked against this config's (or the code here, `adopted_pins`); and
    where each unit's tasks come from."""
    policies = FetchedPolicies(
        options,
        trainer_key,
        config.model.dtype,
        keep=config.contract.async_level + 1,
        fetching=config.shardcast.client,
        device=device,
        lora=config.trainer.lora.enabled,
    )
    newest = None
    while newest is None:
        step = client.reads.run_state(options.run_id).current_step
        newest = policies.fetcher.latest_version(ceiling=step)
        if newest is None:
            if options.stop.wait(options.poll_seconds):
                raise ValidatorStopped("stopped before any checkpoint was announced")
    start = policies.path(newest)
    check_pins(config.tasks, start, adopted_pins)
    policies.prefetch.start()
    tasks, tokenizer = build_tasks(config.tasks), load_tokenizer(start)
    context = ValidationContext(
        config=config,
        settings=config.validator,
        tasks=tasks,
        tokenizer=tokenizer,
        policy=policies,
        task_seed=lambda node, step, batch: client.task_seed(options.run_id, step, batch, node_id=node),
        seen=SeenFiles(options.work_dir / "seen.sqlite"),
        limits=RolloutLimits.for_contract(config.contract, policy_vocab_size(start)),
        env_replay=env_replay(config, tasks, tokenizer),
    )
    return SwarmContext(
        context, community_tasks(client, options.run_id, tasks, config.tasks.community.admission.limits)
    )


@dataclass
class SwarmContext:
    """A swarm validator's context, and where each unit's tasks come from (the run's own or a pack's)."""

    context: ValidationContext
    community: CommunityTasks

    def for_unit(self, submission: SubmissionInfo) -> ValidationContext:
        """The context of one file: the tasks of the unit it was leased for, scored by the pack's own verifier
        when the unit is a community pack's."""
        context = leased_unit(self.context, submission)
        unit = self.community.unit(submission.step, submission.batch_index)
        if unit.pack is None:
            return context
        pack, config, tokenizer = unit.pack, context.config, context.tokenizer
        return dataclasses.replace(
            context,
            tasks=unit.tasks,
            pack_scores=lambda rows: judge_pack_rows(pack, rows, tokenizer, config.tasks),
        )


def leased_unit(context: ValidationContext, submission: SubmissionInfo) -> ValidationContext:
    """The context for one file: it must fill the unit its submission was leased for, so the seed of any other
    batch index is refused (a node holding two units cannot file one's best batch under the other)."""
    if submission.batch_index is None:
        return context

    def seed(node: str, step: int, batch_index: int) -> int:
        if batch_index != submission.batch_index:
            raise CheckFailed(
                "assigned_prompts",
                f"the file claims batch {batch_index}; the unit leased for it is batch {submission.batch_index}",
            )
        return context.task_seed(node, step, batch_index)

    return dataclasses.replace(context, task_seed=seed)


def judge(client: ValidatorClient, submission: SubmissionInfo, swarm: SwarmContext, work_dir: Path) -> dict:
    """The verdict of one submission, judged once: a recorded verdict is returned as it was."""
    record_path = work_dir / "verdicts" / f"{submission.id}.json"
    if record_path.exists():
        return json.loads(record_path.read_text())
    path = work_dir / "submissions" / f"step_{submission.step}" / f"{submission.id}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_bytes(client.fetch_submission(submission))
    except CoordinatorError as exc:
        if exc.kind not in _UNREADABLE:
            raise
        # The stored bytes are not the file the node committed to (or are gone): nothing to judge.
        record = {
            "accept": False,
            "check": _UNREADABLE[exc.kind],
            "reason": exc.detail,
            "rewards_summary": {},
        }
        write_json_atomic(record_path, record)
        return record
    # No recorded verdict: any trace of this exact file in the replay table is from a judgement cut short.
    swarm.context.seen.forget(submission.sha256)
    verdict = validate_file(path, submission.step, swarm.for_unit(submission), node_id=submission.node_id)
    rows = verdict.scored_rows or []
    accept, check, reason = verdict.accepted, verdict.failed_check or "all", verdict.reason
    tokens = completion_tokens(rows)
    if accept and (submission.rows, submission.tokens) != (len(rows), tokens):
        # Credit is what this validator measured, but an honest node claims its file's true size: a lie is forgery.
        accept, check = False, "claims"
        reason = f"claimed {submission.rows} rows / {submission.tokens} tokens; the file has {len(rows)} / {tokens}"
    record = {
        "accept": accept,
        "check": check,
        "reason": reason,
        "rows": len(rows) if accept else None,  # measured in the file: the credit of an accepted one
        "tokens": tokens if accept else None,
        "rewards_summary": {
            "rows": len(rows),
            "mean_reward": sum(r.reward for r in rows) / len(rows) if rows else None,
            "passed": verdict.passed,
        },
    }
    if accept and verdict.pack_scores is not None:  # what the pack's verifier gave: the run measures the pack
        unit = swarm.community.unit(submission.step, submission.batch_index)
        assert unit.share is not None
        record["pack"] = {"pack_id": unit.share.pack_id, "scores": verdict.pack_scores.by_row()}
    write_json_atomic(record_path, record)
    return record


def run_validator_node(config: RunConfig, options: ValidatorOptions) -> int:
    """Judge submissions until stopped or the run has drained; returns how many verdicts were posted."""
    torch.set_num_threads(config.worker.torch_threads)
    device = resolve_device(options.device)  # a missing GPU is refused before the validator registers
    # A run.toml pins the code here, checked against the trainer's pins when its first policy arrives.
    adopted = adopt_local_pins(config.tasks)
    reward_computer(config.tasks)  # and so are reward functions other than the run pinned
    identity = Identity.load_or_create(options.key)
    retry = node_retry(config.swarm.coordinator_retry_s)
    client = ValidatorClient.at(options.coordinator_url, identity, retry=retry, stop=options.stop)
    # Registering is not needed to judge; it declares the validator's hardware to the coordinator's node info.
    client.register(hardware_of(device, config.worker.torch_threads))
    client.check_contract(options.run_id, config.contract)  # judging by another contract is refused here
    trainer_key = client.reads.run_state(options.run_id).trainer_public_key
    context = swarm_context(config, client, options, trainer_key, device, adopted)
    check_reward_functions(config, context.context.tasks)  # tried on the run's first rows before any judging
    posted = 0
    tally: Counter[tuple[str, str]] = Counter()  # (outcome, check) → verdicts posted
    timing = {"judge_seconds_total": 0.0}
    metrics = serve_metrics(config.metrics, validator_collector(tally, timing), options.work_dir)
    packs = _start_pack_checker(config, options, identity, retry)
    try:
        while not options.stop.is_set():
            asked, wait_s = time.monotonic(), options.poll_seconds * LEASE_WAIT_POLLS
            submission = client.lease_validation(options.run_id, wait_s=wait_s).submission
            if submission is None:
                if client.reads.run_state(options.run_id).status == "drained":
                    log.info("the run has drained: every submitted file has its verdict")
                    break
                if time.monotonic() - asked < wait_s:  # not held for a file (a coordinator that holds none)
                    options.stop.wait(options.poll_seconds)
                continue
            started = time.monotonic()
            record = judge(client, submission, context, options.work_dir)
            timing["judge_seconds_total"] += time.monotonic() - started
            if not post(client, options.run_id, submission, record):
                continue
            posted += 1
            tally["accepted" if record["accept"] else "rejected", record["check"]] += 1
            log.info(
                "submission %d (step %d, node %s…): %s",
                submission.id,
                submission.step,
                submission.node_id[:12],
                "accepted" if record["accept"] else f"rejected by {record['check']}: {record['reason']}",
            )
    finally:
        packs.stop.set()
        client.close()
        if metrics is not None:
            metrics.close()
        if isinstance(context.context.policy, FetchedPolicies):
            context.context.policy.close()
    return posted


def post(client: ValidatorClient, run_id: str, submission: SubmissionInfo, record: dict) -> bool:
    """Post a recorded verdict (and, for an accepted file of a pack's unit, the pack's scores); False when
    the coordinator no longer wants it."""
    try:
        client.post_verdict(
            submission.id,
            accept=record["accept"],
            check=record["check"],
            reason=record["reason"][:2000],
            rewards_summary=record["rewards_summary"],
            rows=record.get("rows"),
            tokens=record.get("tokens"),
        )
    except CoordinatorError as exc:
        if exc.kind not in _MOOT:
            raise
        log.info("submission %d: verdict not needed (%s)", submission.id, exc.kind)
        return False
    if "pack" in record:
        try:
            PackClient(client.transport).post_scores(
                run_id, submission.id, record["pack"]["pack_id"], record["pack"]["scores"]
            )
        except CoordinatorError as exc:  # the file's verdict stands; the pack misses one measurement
            if exc.kind != "already_recorded":
                log.warning("submission %d: pack scores not recorded: %s", submission.id, exc)
    return True


def _start_pack_checker(
    config: RunConfig, options: ValidatorOptions, identity: Identity, retry
) -> PackCheckerThread:
    """Pack admission beside file judging, on its own connection (the coordinator offers none to a run that
    takes no packs, so it costs that run one request per poll)."""
    client = PackClient.at(options.coordinator_url, identity, retry=retry, stop=options.stop)
    checker = PackChecker(client, options.run_id, config, options.work_dir)
    thread = PackCheckerThread(checker, threading.Event(), poll_seconds=max(2.0, options.poll_seconds))
    thread.start()
    return thread


def validator_collector(tally: Counter[tuple[str, str]], timing: dict[str, float]) -> RoleCollector:
    """`swarmrl_validator_verdicts_total{outcome,check}` and the seconds spent judging."""
    verdicts = LabelledCounter(
        "verdicts_total",
        "verdicts this validator posted, by outcome and deciding check",
        ("outcome", "check"),
        lambda: {labels: count for labels, count in tally.items()},
    )
    seconds = LabelledCounter(
        "judge_seconds_total", "seconds spent judging files", (), lambda: {(): timing["judge_seconds_total"]}
    )
    return RoleCollector("validator", [verdicts, seconds])
