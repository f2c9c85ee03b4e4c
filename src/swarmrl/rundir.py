"""The run directory: the only channel between the trainer and local workers (and what a person inspects).

<run>/config.json              resolved config of the run
<run>/checkpoints/step_k/      policy k (HF directory); step_0 is the starting model
<run>/trainer_state/step_k.pt  optimizer, scheduler and RNG for resume
<run>/rollouts/step_k/*.parquet  rollout files produced for training step k
<run>/rollouts/step_k/COMPLETE   written by the trainer once step k has all the data it will use
<run>/metrics.jsonl            one JSON object per trainer step
<run>/STOP                     asks every process of the run to finish
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmrl.errors import writing


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def trainer_state(self) -> Path:
        return self.root / "trainer_state"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def stop_file(self) -> Path:
        return self.root / "STOP"

    def rollouts(self, step: int) -> Path:
        return self.root / "rollouts" / f"step_{step}"

    def complete_marker(self, step: int) -> Path:
        return self.rollouts(step) / "COMPLETE"

    def is_complete(self, step: int) -> bool:
        return self.complete_marker(step).exists()

    def mark_complete(self, step: int, summary: dict[str, Any]) -> None:
        write_json_atomic(self.complete_marker(step), summary)

    def should_stop(self) -> bool:
        return self.stop_file.exists()

    def append_metrics(self, record: dict[str, Any]) -> None:
        with writing(self.metrics), self.metrics.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics.exists():
            return []
        return [json.loads(line) for line in self.metrics.read_text().splitlines() if line.strip()]


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)


@dataclass(frozen=True)
class RunDirSource:
    """A local run: workers write `rollouts/step_k/*.parquet`; a COMPLETE marker closes the step."""

    rundir: RunDir

    def open_step(self, step: int) -> None:
        pass

    def new_files(self, step: int, seen: set[str]) -> list[Path]:
        directory = self.rundir.rollouts(step)
        return (
            sorted(p for p in directory.glob("*.parquet") if p.name not in seen) if directory.is_dir() else []
        )

    def close_step(self, step: int, summary: dict[str, Any]) -> None:
        self.rundir.mark_complete(step, summary)

    def should_stop(self) -> bool:
        return self.rundir.should_stop()
