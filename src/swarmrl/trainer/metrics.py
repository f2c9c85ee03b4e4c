"""Where the trainer's per-step metrics go: always the run's metrics.jsonl, plus TensorBoard / W&B if asked."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from swarmrl.config import MetricsSection
from swarmrl.node_metrics import RoleCollector, serve_metrics
from swarmrl.rundir import RunDir


class MetricsSinkError(Exception):
    """A configured metrics backend is not installed or cannot start."""


# Gets each record's finite scalars by step: a swarm trainer sends them to its coordinator's dashboard.
MetricsForward = Callable[[int, dict[str, float]], None]


class MetricsSink:
    def __init__(
        self,
        config: MetricsSection,
        rundir: RunDir,
        run_config: dict[str, Any],
        forward: MetricsForward | None = None,
    ) -> None:
        self.rundir = rundir
        self._forward = forward
        self._tensorboard = None
        self._wandb = None
        if config.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise MetricsSinkError("metrics.tensorboard is on but tensorboard is not installed") from exc
            self._tensorboard = SummaryWriter(log_dir=str(rundir.root / "tensorboard"))
        if config.wandb_project:
            try:
                import wandb
            except ImportError as exc:
                raise MetricsSinkError("metrics.wandb_project is set but wandb is not installed") from exc
            self._wandb = wandb.init(project=config.wandb_project, dir=str(rundir.root), config=run_config)
        # Prometheus reads the last step's record: swarmrl_trainer_step, swarmrl_trainer_loss, ...
        self._last: dict[str, Any] = {}
        self._prometheus = serve_metrics(
            config, RoleCollector("trainer", gauges=lambda: self._last), rundir.root
        )

    def log(self, record: dict[str, Any]) -> None:
        self.rundir.append_metrics(record)
        self._last = {k: v for k, v in record.items() if k != "time"}
        step = int(record["step"])
        scalars = {
            k: float(v) for k, v in record.items() if isinstance(v, int | float) and k not in ("step", "time")
        }
        if self._tensorboard is not None:
            for key, value in scalars.items():
                self._tensorboard.add_scalar(key, value, step)
            self._tensorboard.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        if self._forward is not None:
            self._forward(step, {k: v for k, v in scalars.items() if math.isfinite(v)})

    def close(self) -> None:
        if self._prometheus is not None:
            self._prometheus.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
