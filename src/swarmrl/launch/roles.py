"""Each role of a local run, built from the run directory alone (what `swarmrl trainer|worker --run-dir` run)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from swarmrl.configs import ConfigError, RunConfig, load_run_config
from swarmrl.configs.devices import check_device
from swarmrl.configs.shardcast import ShardcastConfig
from swarmrl.coordinator.api import METRIC_NAME_PATTERN
from swarmrl.coordinator.client import CoordinatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.identity import Identity
from swarmrl.launch.plan import local_workers, trainer_generates
from swarmrl.models import load_tokenizer, policy_vocab_size
from swarmrl.rollouts import RolloutLimits
from swarmrl.rundir import RunDir, RunDirSource, write_text_atomic
from swarmrl.shardcast.origin import Origin
from swarmrl.steps import checkpoint_dir, latest_checkpoint
from swarmrl.tasks.registry import build_tasks
from swarmrl.trainer.data import RolloutFeed, RolloutSource, Scorer
from swarmrl.trainer.metrics import MetricsForward
from swarmrl.trainer.parallel import is_distributed
from swarmrl.trainer.swarm_source import AcceptedSubmissions
from swarmrl.trainer.train import AfterStep, Publisher, run_trainer, train_device
from swarmrl.validator.scoring import score_rows
from swarmrl.worker.colocated import ColocatedSource, colocated_source
from swarmrl.worker.local import run_local_worker

log = logging.getLogger(__name__)


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
    with contextlib.ExitStack() as stack:
        source, publish, forward = _rollout_endpoints(
            config, rundir, device, coordinator_url, key, origin, stack
        )
        feed = RolloutFeed(
            source,
            trusted_scorer(config, rundir),
            async_level=config.worker.async_level,
            group_size=config.worker.group_size,
            limits=_rollout_limits(config, rundir, swarm=coordinator_url is not None),
            max_files=config.trainer.max_files_per_step,
            poll_seconds=0.1 if coordinator_url is None else config.swarm.poll_seconds,
        )

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
) -> tuple[RolloutSource, Publisher | None, MetricsForward | None]:
    """Where the trainer's rollouts come from, where its checkpoints go and where its metrics go besides
    metrics.jsonl: an in-process engine (`trainer.colocate`), the run directory, or a swarm."""
    if config.trainer.colocate:
        return _colocated_source(config, coordinator_url, device), None, None
    if coordinator_url is None:
        if trainer_generates(config, distributed=is_distributed()):
            # It writes as the local worker after the launcher's last one.
            source = colocated_source(
                config, device, index=local_workers(config), files_per_step=files_per_step(config)
            )
            return source, None, None
        return RunDirSource(rundir, files_per_step=files_per_step(config)), None, None
    shardcast = ShardcastConfig.model_validate({**config.shardcast.model_dump(), **(origin or {})})
    return _swarm_endpoints(config, shardcast, rundir, coordinator_url, key, stack)


def files_per_step(config: RunConfig) -> int:
    """Rollout files a step needs when every group is informative."""
    return -(-config.trainer.prompts_per_step // config.worker.prompts_per_batch)


def _rollout_limits(config: RunConfig, rundir: RunDir, *, swarm: bool) -> RolloutLimits:
    """Bounds on every rollout file the trainer reads. A swarm's files passed a validator, so they carry
    proofs; a local run's carry them only with `worker.local_proofs`, and no validator reads them."""
    limits = RolloutLimits.for_worker(config.worker, policy_vocab_size(checkpoint_dir(rundir.checkpoints, 0)))
    return limits if swarm else limits.model_copy(update={"require_proofs": config.worker.local_proofs})


def trusted_scorer(config: RunConfig, rundir: RunDir) -> Scorer:
    """The trainer's own rewards and advantages of rollout rows (multi-turn rows by replaying their
    environment): nothing a worker claims is used."""
    tokenizer = load_tokenizer(checkpoint_dir(rundir.checkpoints, 0))
    tasks = build_tasks(config.tasks)
    scorer = functools.partial(
        score_rows,
        tasks=tasks,
        tokenizer=tokenizer,
        tasks_config=config.tasks,
        group_size=config.worker.group_size,
        advantage=config.trainer.advantage,
    )
    if config.env is not None:
        from swarmrl.envs.build import with_env_replay

        scorer = with_env_replay(scorer, config, tasks, tokenizer)
    return scorer


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
):
    """The trainer's coordinator feed, its shardcast origin (serving every checkpoint it publishes; the
    origin's URL, as relays are to open it, goes to `origin_url_file`) and where its metrics go (the
    coordinator's dashboard)."""
    if key is None:
        raise ValueError("a swarm trainer needs --key, the private key the run was created with")
    identity = Identity.load(key)
    client = stack.enter_context(CoordinatorClient(coordinator_url, identity, max_retries=8))
    origin = Origin(rundir.checkpoints, identity, config.run.id, shardcast.origin_config())
    server = origin.serve_in_thread()
    stack.callback(server.stop)
    newest = latest_checkpoint(rundir.checkpoints)
    if newest is not None and newest not in origin.store.versions():
        # A fresh run (step 0), or a trainer killed between saving a checkpoint and publishing it.
        origin.publish(None, newest)
    url = shardcast.advertise_url or server.url
    log.info("shardcast origin serving on %s, advertised to relays as %s", server.url, url)
    write_text_atomic(origin_url_file(rundir), url)
    source = AcceptedSubmissions(
        client,
        config.run.id,
        rundir,
        units_per_step=files_per_step(config),
        last_step=config.trainer.steps - 1,
        async_level=config.worker.async_level,
    )
    return (
        source,
        lambda step: origin.publish(None, step),
        functools.partial(_report_metrics, client, config.run.id),
    )


def _report_metrics(client: CoordinatorClient, run_id: str, step: int, metrics: dict[str, float]) -> None:
    """A dashboard figure that does not arrive costs a point on a curve, never the run. A name the coordinator
    would refuse is left out (the file metrics.jsonl keeps it) rather than costing the step's other figures."""
    sendable = {k: v for k, v in metrics.items() if re.fullmatch(METRIC_NAME_PATTERN, k)}
    try:
        client.report_metrics(run_id, step, sendable)
    except CoordinatorError as exc:
        log.warning("step %d: metrics not reported to the coordinator: %s", step, exc)


def worker_role(run_dir: Path, index: int, device: str | None = None) -> int:
    """A local worker; `device` (the CLI's --device) overrides the run config's `worker.device`."""
    config = load_run_config(run_dir)
    if device is not None:
        config.worker.device = check_device(device)
    return run_local_worker(config, index)
