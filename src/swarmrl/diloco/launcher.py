"""Start N worker processes on 127.0.0.1 (torch.multiprocessing spawn, gloo), collect their reports.

`launch_many` runs several configs back to back in the same processes and process group, which saves the
process start-up and imports per run (most of a small run's wall time on a shared CPU).
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from swarmrl.configs.diloco import DiLoCoConfig
from swarmrl.diloco.communicators.torch_dist import TorchDistCommunicator, init_process_group
from swarmrl.diloco.errors import DiLoCoConfigError, DiLoCoError
from swarmrl.diloco.model import build_tiny_causal_lm, count_parameters
from swarmrl.diloco.reports import RunReport, WorkerReport
from swarmrl.diloco.train import train_worker


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker_entry(rank: int, world_size: int, port: int, configs_json: list[str], out_dir: str) -> None:
    configs = [DiLoCoConfig.model_validate_json(text) for text in configs_json]
    init_process_group(configs[0].backend, "127.0.0.1", port, rank, world_size)
    try:
        for index, config in enumerate(configs):
            dist.barrier()
            report = train_worker(config, TorchDistCommunicator())
            Path(out_dir, f"run{index}_rank{rank}.json").write_text(report.model_dump_json())
    finally:
        dist.destroy_process_group()


def launch_many(configs: list[DiLoCoConfig]) -> list[RunReport]:
    """Run each config to completion, in order, in one set of worker processes."""
    if not configs:
        return []
    first = configs[0]
    if any(c.workers != first.workers or c.backend != first.backend for c in configs):
        raise DiLoCoConfigError("launch_many needs the same workers and backend in every config")
    with tempfile.TemporaryDirectory(prefix="swarmrl-diloco-") as out_dir:
        try:
            mp.spawn(
                _worker_entry,
                args=(first.workers, free_port(), [c.model_dump_json() for c in configs], out_dir),
                nprocs=first.workers,
                join=True,
            )
        except ProcessException as exc:
            raise DiLoCoError(f"worker {exc.error_index} failed: {exc}") from exc
        runs = []
        for index, config in enumerate(configs):
            reports = []
            for rank in range(config.workers):
                path = Path(out_dir, f"run{index}_rank{rank}.json")
                if not path.exists():
                    raise DiLoCoError(f"worker {rank} exited without a report for run {index}")
                reports.append(WorkerReport.model_validate_json(path.read_text()))
            parameters = count_parameters(build_tiny_causal_lm(config.model))
            runs.append(RunReport(config=config, parameters=parameters, workers=reports))
    return runs


def launch(config: DiLoCoConfig) -> RunReport:
    """Run one multi-process training job to completion and return every worker's report."""
    return launch_many([config])[0]
