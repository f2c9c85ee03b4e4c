"""Results of one worker and of one run, as written to disk and printed by the CLI and the benchmark."""

from __future__ import annotations

from pydantic import BaseModel, Field

from swarmrl.configs.diloco import DiLoCoConfig


class WorkerReport(BaseModel):
    rank: int = Field(description="Worker rank.")
    eval_loss: float = Field(description="Mean next-byte cross-entropy of this worker's final model on eval.")
    bytes_sent: int = Field(description="Bytes this worker put on the wire (ring-algorithm model).")
    peak_bytes_per_sync: int = Field(description="Largest number of bytes sent by one sync event.")
    sync_events: int = Field(description="Number of sync events (DDP: gradient all-reduces).")
    wall_seconds: float = Field(description="Wall time of the training loop (eval excluded).")
    compute_seconds: float = Field(
        description="Wall time outside sync work (DiLoCo: outer steps and waits on all-reduces; DDP: all-reduces)."
    )
    eval_curve: list[tuple[int, float]] = Field(default_factory=list, description="(step, eval loss) pairs.")

    @property
    def compute_utilisation(self) -> float:
        return self.compute_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0


class RunReport(BaseModel):
    config: DiLoCoConfig = Field(description="The resolved config of the run.")
    parameters: int = Field(description="Parameters of the model.")
    workers: list[WorkerReport] = Field(description="One report per worker, by rank.")

    @property
    def eval_loss(self) -> float:
        return sum(w.eval_loss for w in self.workers) / len(self.workers)

    @property
    def bytes_sent_per_worker(self) -> float:
        return sum(w.bytes_sent for w in self.workers) / len(self.workers)

    @property
    def peak_bytes_per_sync(self) -> int:
        return max(w.peak_bytes_per_sync for w in self.workers)

    @property
    def compute_utilisation(self) -> float:
        return sum(w.compute_utilisation for w in self.workers) / len(self.workers)

    def summary(self) -> dict[str, float | int | str]:
        c = self.config
        label = (
            "ddp"
            if c.mode == "ddp"
            else f"diloco H={c.inner_steps} F={c.fragments} {c.codec} outer {c.outer.lr:g}/{c.outer.momentum:g}"
        )
        return {
            "run": label + (" throttled" if c.throttle.enabled else ""),
            "eval_loss": round(self.eval_loss, 4),
            "bytes_per_worker": int(self.bytes_sent_per_worker),
            "peak_bytes_per_sync": self.peak_bytes_per_sync,
            "compute_utilisation": round(self.compute_utilisation, 3),
            "wall_s": round(max(w.wall_seconds for w in self.workers), 1),
        }
