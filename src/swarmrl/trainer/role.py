"""The trainer, assembled from its run directory (what `swarmrl trainer --run-dir` runs): its rollout source (the run
directory, a swarm's accepted submissions or a colocated engine), trusted scoring, and where checkpoints go."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from swarmrl.configs import ConfigError, RunConfig, load_run_config
from swarmrl.configs.shardcast import ShardcastConfig
from swarmrl.coordinator.api import METRIC_NAME_PATTERN
from swarmrl.coordinator.client import TrainerClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.pack_client import PackClient, community_tasks
from swarmrl.coordinator.transport import node_retry
from swarmrl.generation.colocated import ColocatedSource, colocated_source
from swarmrl.httpserve.reach import loopback_warning
from swarmrl.identity import Identity
from swarmrl.layout import borrowed_cores, local_workers, trainer_generates
from swarmrl.models import load_tokenizer, policy_vocab_size
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts import RolloutLimits, RolloutRow, ScoredRow
from swarmrl.rollouts.checks import structural_checks
from swarmrl.rollouts.scoring import score_rows
from swarmrl.rundir import RunDir, RunDirSource, write_text_atomic
from swarmrl.shardcast.origin import Origin
from swarmrl.steps import checkpoint_dir, latest_checkpoint
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.reward_check import check_reward_functions
from swarmrl.tasks.reward_functions import RunSchedule
from swarmrl.tasks.run_pins import write_pins
from swarmrl.tasks.task import TaskSource
from swarmrl.trainer.core_share import CoreShare
from swarmrl.trainer.data import RolloutFeed, RolloutSource
from swarmrl.trainer.metrics import MetricsForward
from swarmrl.trainer.pack_units import PackUnits
from swarmrl.trainer.parallel import is_distributed
from swarmrl.trainer.swarm_source import AcceptedSubmissions, FileChecks
from swarmrl.trainer.train import AfterStep, Publisher, run_trainer, train_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SwarmFiles:
    """How a swarm trainer takes each file: its checks against its submission, and the parts of community pack
    units (built once the trainer's client exists)."""

    checks: FileChecks
    pack_units: Callable[[TrainerClient], PackUnits]


def trainer_role(
    run_dir: Path,
    *,
    stop_after_steps: int | None = None,
    threads: int = 1,
    coordinator_url: str | None = None,
    key: Path | None = None,
    origin: dict[str, Any] | None = None,
    after_step: AfterStep | None = None,
) -> int:
    """Train a run: local (rollouts from the run directory) or, with `coordinator_url`, the trainer of a swarm
    (accepted submissions in; checkpoints out through a shardcast origin set by the run's [shardcast] section,
    with `origin` overriding its fields: origin_host, origin_port, advertise_url). Under torchrun
    (WORLD_SIZE > 1) each rank joins a gloo/NCCL process group."""
    torch.set_num_threads(threads)
    config = load_run_config(run_dir)
    config.metrics.check_installed()
    # Refuses a missing GPU before joining the group; NCCL only when this rank trains on one.
    device = train_device(config.trainer.device)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rundir = RunDir(run_dir)
    tokenizer = load_tokenizer(checkpoint_dir(rundir.checkpoints, 0))
    tasks = build_tasks(config.tasks)
    scorer = trusted_scorer(config, tasks, tokenizer)
    checks = functools.partial(
        structural_checks, config=config, tasks=tasks, prompts=prompt_format(tokenizer, config.prompt)
    )
    pack_units = functools.partial(
        _pack_units, config=config, rundir=rundir, tasks=tasks, tokenizer=tokenizer
    )
    with contextlib.ExitStack() as stack:
        source, publish, forward = _rollout_endpoints(
            config, rundir, device, coordinator_url, key, origin, stack, SwarmFiles(checks, pack_units)
        )
        feed = _feed(config, rundir, source, scorer)

        def collect(step: int):
            return feed.collect(step, config.trainer.prompts_per_step, config.trainer.max_wait_seconds)

        try:
            last = run_trainer(
                config,
                collect,
                publish,
                stop_after_steps=stop_after_steps,
                weight_sink=source.engine if isinstance(source, ColocatedSource) else None,
                after_step=after_step,
                forward_metrics=forward,
                core_share=_core_share(config, source),
            )
            if dist.is_initialized():
                # Rank 0 still writes the last checkpoint when the others return; tearing gloo down under it
                # aborts a rank ("terminate called without an active exception").
                dist.barrier()
            return last
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()


def _rollout_endpoints(
    config: RunConfig,
    rundir: RunDir,
    device: torch.device,
    coordinator_url: str | None,
    key: Path | None,
    origin: dict[str, Any] | None,
    stack: contextlib.ExitStack,
    files: SwarmFiles,
) -> tuple[RolloutSource, Publisher | None, MetricsForward | None]:
    """Where the trainer's rollouts come from, where its checkpoints go and where its metrics go besides
    metrics.jsonl: an in-process engine (`trainer.colocate`), the run directory, or a swarm (whose files pass
    `files.checks` before they train, each unit's tasks the run's own or a community pack's)."""
    if config.trainer.colocate:
        return _colocated_source(config, coordinator_url, device), None, None
    if coordinator_url is None:
        if trainer_generates(config, distributed=is_distributed()):
            # It writes as the local worker after the launcher's last one.
            return colocated_source(config, device, index=local_workers(config)), None, None
        source = RunDirSource(
            rundir,
            groups_per_step=config.trainer.prompts_per_step,
            prompts_per_file=config.contract.prompts_per_batch,
            whole_files=config.contract.local_proofs,
        )
        return source, None, None
    shardcast = ShardcastConfig.model_validate({**config.shardcast.model_dump(), **(origin or {})})
    return _swarm_endpoints(config, shardcast, rundir, coordinator_url, key, stack, files)


def _core_share(config: RunConfig, source) -> CoreShare | None:
    """A local run's trainer trains on its workers' cores while they wait (`trainer.borrow_idle_cores`)."""
    cores, own = borrowed_cores(config, distributed=is_distributed()), torch.get_num_threads()
    if cores <= own or not isinstance(source, RunDirSource | ColocatedSource):
        return None
    log.info("the trainer trains on %d threads while its workers wait, on %d while they generate", cores, own)
    return CoreShare(source.workers_idle, cores, own)


def files_per_step(config: RunConfig) -> int:
    """Rollout files a step needs when every group is informative."""
    return -(-config.trainer.prompts_per_step // config.contract.prompts_per_batch)


def _rollout_limits(config: RunConfig, rundir: RunDir, *, swarm: bool) -> RolloutLimits:
    """Bounds on every rollout file the trainer reads. A swarm's files passed a validator, so they carry
    proofs; a local run's carry them only with `contract.local_proofs`, and no validator reads them."""
    limits = RolloutLimits.for_contract(
        config.contract, policy_vocab_size(checkpoint_dir(rundir.checkpoints, 0))
    )
    return limits if swarm else limits.model_copy(update={"require_proofs": config.contract.local_proofs})


def trusted_scorer(
    config: RunConfig, tasks: TaskSource, tokenizer: PreTrainedTokenizerBase
) -> Callable[[list[RolloutRow]], list[ScoredRow]]:
    """How the trainer scores rows itself: the run's reward functions (refused here, before any training, when
    they differ from what the run pinned) or verifiers, and for a multi-turn run its environment's replay."""
    check_reward_functions(config, tasks)  # pinned, imported, and tried on the run's first rows
    scorer: Callable[[list[RolloutRow]], list[ScoredRow]] = functools.partial(
        score_rows,
        tasks=tasks,
        tokenizer=tokenizer,
        tasks_config=config.tasks,
        group_size=config.contract.group_size,
        advantage=config.trainer.advantage,
        schedule=RunSchedule.of(config, len(tasks)),
    )
    if config.env is not None:  # multi-turn rows are scored by replaying their environment
        from swarmrl.envs.build import with_env_replay

        scorer = with_env_replay(scorer, config, tasks, tokenizer)
    return scorer


def _feed(config: RunConfig, rundir: RunDir, source, scorer) -> RolloutFeed:
    """The trainer's rollout feed; a swarm's accepted submissions are also audited by the trainer's own checks."""
    swarm = isinstance(source, AcceptedSubmissions)
    return RolloutFeed(
        source,
        scorer,
        async_level=config.contract.async_level,
        group_size=config.contract.group_size,
        limits=_rollout_limits(config, rundir, swarm=swarm),
        max_files=config.trainer.max_files_per_step,
        poll_seconds=config.swarm.poll_seconds if swarm else 0.1,
        audit=source if swarm else None,
        reward_failure_share=config.tasks.reward_failure_share,
    )


def _colocated_source(
    config: RunConfig, coordinator_url: str | None, device: torch.device
) -> ColocatedSource:
    """The in-process engine and its rollout source of a `trainer.colocate` run (local, one process only)."""
    if coordinator_url is not None:
        raise ConfigError("trainer.colocate is a local run: a swarm trainer takes its rollouts from workers")
    if is_distributed():
        raise ConfigError(
            "trainer.colocate runs one trainer process; it cannot be one rank of a torchrun job"
        )
    return colocated_source(config, device)


def origin_url_file(rundir: RunDir) -> Path:
    return rundir.root / "swarm" / "origin.url"


def _swarm_endpoints(
    config,
    shardcast: ShardcastConfig,
    rundir: RunDir,
    coordinator_url: str,
    key: Path | None,
    stack: contextlib.ExitStack,
    files: SwarmFiles,
):
    """The trainer's coordinator feed (whose files pass `checks` before they train), its shardcast origin
    (serving every checkpoint it publishes; the origin's URL, as relays are to open it, goes to
    `origin_url_file`) and where its metrics go (the coordinator's dashboard)."""
    if key is None:
        raise ValueError("a swarm trainer needs --key, the private key the run was created with")
    identity = Identity.load(key)
    retry = node_retry(config.swarm.coordinator_retry_s)
    client = stack.enter_context(TrainerClient.at(coordinator_url, identity, retry=retry))
    client.check_contract(config.run.id, config.contract)  # training by another contract is refused here
    origin = Origin(rundir.checkpoints, identity, config.run.id, shardcast.origin_config())
    server = origin.serve_in_thread()
    stack.callback(server.stop)

    def publish(step: int) -> None:
        # Validators started from the run's run.toml check their reward functions against these pins.
        write_pins(checkpoint_dir(rundir.checkpoints, step), config.tasks)
        origin.publish(None, step)

    newest = latest_checkpoint(rundir.checkpoints)
    if newest is not None and newest not in origin.store.versions():
        # A fresh run (step 0), or a trainer killed between saving a checkpoint and publishing it.
        publish(newest)
    url = shardcast.advertise_url or server.url
    log.info("shardcast origin serving on %s, advertised to relays as %s", server.url, url)
    if (warning := loopback_warning(url, shardcast.origin_host)) is not None:
        log.warning("%s", warning)
    write_text_atomic(origin_url_file(rundir), url)
    source = AcceptedSubmissions(
        client,
        config.run.id,
        rundir,
        units_per_step=files_per_step(config),
        last_step=config.trainer.steps - 1,
        async_level=config.contract.async_level,
        checks=files.checks,
        packs=files.pack_units(client),
    )
    return (
        source,
        publish,
        functools.partial(_report_metrics, client, config.run.id),
    )


def _pack_units(
    client: TrainerClient,
    *,
    config: RunConfig,
    rundir: RunDir,
    tasks: TaskSource,
    tokenizer: PreTrainedTokenizerBase,
) -> PackUnits:
    """Each unit's tasks, the run's own or a community pack's, and the pack units' scoring and reports."""
    limits = config.tasks.community.admission.limits
    return PackUnits(
        community_tasks(client, config.run.id, tasks, limits),
        PackClient(client.transport),
        tokenizer,
        config.tasks,
        config.contract.group_size,
        config.contract.async_level,
        rundir.root / "packs_trained.jsonl",
    )


def _report_metrics(client: TrainerClient, run_id: str, step: int, metrics: dict[str, float]) -> None:
    """A dashboard figure that does not arrive costs a point on a curve, never the run. A name the coordinator
    would refuse is left out (the file metrics.jsonl keeps it) rather than costing the step's other figures."""
    sendable = {k: v for k, v in metrics.items() if re.fullmatch(METRIC_NAME_PATTERN, k)}
    try:
        client.report_metrics(run_id, step, sendable)
    except CoordinatorError as exc:
        log.warning("step %d: metrics not reported to the coordinator: %s", step, exc)
