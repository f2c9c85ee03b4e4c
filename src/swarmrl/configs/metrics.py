"""The run config's [metrics] section: where the trainer and nodes send their metrics."""

from __future__ import annotations

from importlib.util import find_spec

from pydantic import Field

from swarmrl.configs.base import ConfigError, Section


class MetricsSection(Section):
    wandb_project: str | None = Field(None, description="log to this Weights & Biases project when set")
    tensorboard: bool = Field(False, description="also write TensorBoard event files")
    prometheus_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="trainer, workers and validators serve Prometheus metrics on this port (0: the OS picks; "
        "the URL goes to metrics.url in the run or node directory); unset: not served",
    )
    prometheus_host: str = Field("127.0.0.1", description="address the metrics port binds")

    def check_installed(self) -> None:
        """Refuse, before any work, a sink whose package is missing (not an exit mid-run when the trainer
        starts); checked by whatever starts a trainer, since other roles never load the sinks."""
        needed = {"wandb": self.wandb_project, "tensorboard": self.tensorboard}
        missing = [package for package, wanted in needed.items() if wanted and find_spec(package) is None]
        if missing:
            raise ConfigError(
                f"[metrics] asks for {' and '.join(missing)}, which is not installed: "
                f"pip install 'swarmrl[metrics]' or turn it off"
            )
