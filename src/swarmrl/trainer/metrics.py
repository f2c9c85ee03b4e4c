"""Where the trainer's per-step metrics go: always the run's metrics.jsonl, plus TensorBoard / W&B if asked."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from swarmrl.configs.metrics import MetricsSection
from swarmrl.eval_metrics import EVAL_PREFIX, is_eval_record
from swarmrl.node_metrics import RoleCollector, serve_metrics
from swarmrl.rundir import RunDir

EVAL_STEP = f"{EVAL_PREFIX}step"


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
            # An online eval is logged after later training steps, and W&B drops anything logged below its
            # current step: evals join the newest step's row and are plotted against their own eval/step.
            self._wandb_step = 0
            self._wandb.define_metric(EVAL_STEP)
            self._wandb.define_metric(f"{EVAL_PREFIX}*", step_metric=EVAL_STEP)
        # Prometheus reads the last step's record (swarmrl_trainer_step, swarmrl_trainer_loss, ...) and the
        # last online eval's (swarmrl_trainer_eval_avg_4, ..., swarmrl_trainer_eval_step).
        self._last: dict[str, Any] = {}
        self._last_eval: dict[str, Any] = {}
        self._prometheus = serve_metrics(
            config, RoleCollector("trainer", gauges=lambda: {**self._last, **self._last_eval}), rundir.root
        )

    def log(self, record: dict[str, Any]) -> None:
        """Log a training step's record or an online eval's (`eval/...` keys; see swarmrl.eval_metrics)."""
        self.rundir.append_metrics(record)
        step = int(record["step"])
        scalars = {
            k: float(v) for k, v in record.items() if isinstance(v, int | float) and k not in ("step", "time")
        }
        evaluated = is_eval_record(record)
        if evaluated:
            # Its step is older than the last training step's: it must not move swarmrl_trainer_step back.
            self._last_eval = {**scalars, EVAL_STEP: step}
        else:
            self._last = {k: v for k, v in record.items() if k != "time"}
        if self._tensorboard is not None:
            for key, value in scalars.items():
                self._tensorboard.add_scalar(key, value, step)
            self._tensorboard.flush()
        if self._wandb is not None:
            self._wandb_step = max(self._wandb_step, step)
            self._wandb.log({**scalars, EVAL_STEP: step} if evaluated else scalars, step=self._wandb_step)
        if self._forward is not None:
            self._forward(step, {k: v for k, v in scalars.items() if math.isfinite(v)})

    def close(self) -> None:
        if self._prometheus is not None:
            self._prometheus.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
