"""A local run's process layout: how many worker processes it starts (`swarmrl rl`, `demo`, islands;
`worker.num_workers`) and whether its trainer generates batches too.

"auto" starts one worker per CPU core the run may use but the trainer's (at least one), and every process runs
one torch thread: several threads per process pay off only with idle cores, and on a loaded machine OpenMP's
barriers spin on cores other processes need (TRL's demo step at load 8-20 on 2 cores: 7.8 samples/s with two
threads, 69 with one). Workers generate only the files the trainer asked for and then wait, so a worker never
takes the trainer's core for files nobody reads. Measured on 2 cores (issue 34's runs, in the history of
benchmarks/RESULTS.md): with the trainer the bottleneck (the 6M-parameter workload) one worker beside it beats
two (16.9 vs 11.6 samples/s), which take turns with the trainer on its core; at the demo workload, where
generation is the bottleneck, two beat one.
Workers that generate on a GPU: one. While the workers wait, the trainer trains on their cores too
(`trainer.borrow_idle_cores`, `swarmrl.trainer.core_share`).
"""

from __future__ import annotations

import os

from swarmrl.configs import RunConfig
from swarmrl.devices import resolve_device


def available_cores() -> set[int]:
    return os.sched_getaffinity(0)


def local_workers(config: RunConfig, cores: int | None = None) -> int:
    """Worker processes of a local run on this machine (or on one with `cores` CPU cores)."""
    if config.trainer.colocate:
        return 0
    if config.worker.num_workers != "auto":
        return config.worker.num_workers
    if not _on_cpu(config.worker.device):
        return 1
    spare = (cores if cores is not None else len(available_cores())) - 1
    # A trainer that generates while it waits needs no worker on a single core.
    return max(0 if trainer_generates(config) else 1, spare)


def trainer_generates(config: RunConfig, *, distributed: bool = False) -> bool:
    """Whether the trainer of a local run generates batches itself: always when colocated, and with
    `trainer.generate_while_waiting` whenever it would wait for a worker's file."""
    if config.trainer.colocate:
        return True
    setting = config.trainer.generate_while_waiting
    if setting != "auto":
        return setting
    cpu = _on_cpu(config.trainer.device) and _on_cpu(config.worker.device)
    return cpu and not distributed and not config.trainer.lora.enabled


def borrowed_cores(config: RunConfig, *, distributed: bool = False) -> int:
    """Cores the trainer of a local run trains on while its workers wait (1: it keeps to its own)."""
    setting = config.trainer.borrow_idle_cores
    if setting is False or local_workers(config) == 0 or distributed:
        return 1
    if setting == "auto" and not (_on_cpu(config.trainer.device) and _on_cpu(config.worker.device)):
        return 1
    return len(available_cores())


def _on_cpu(device: str) -> bool:
    """Whether a device setting lands on the CPU here."""
    return resolve_device(device).type == "cpu" if device == "auto" else device == "cpu"
