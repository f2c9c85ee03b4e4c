"""The run directory: the only channel between the trainer and local workers (and what a person inspects).

<run>/config.json              resolved config of the run
<run>/checkpoints/step_k/      policy k (HF directory); step_0 is the starting model
<run>/trainer_state/step_k.pt  optimizer, scheduler and RNG for resume
<run>/rollouts/step_k/*.parquet  rollout files produced for training step k
<run>/rollouts/step_k/COMPLETE   written by the trainer once step k has all the data it will use
<run>/rollouts/step_k/REQUEST    how many files the trainer expects step k to need; workers stop there
<run>/metrics.jsonl            one JSON object per trainer step
<run>/STOP                     asks every process of the run to finish
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
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

    def request_marker(self, step: int) -> Path:
        return self.rollouts(step) / "REQUEST"

    def request_files(self, step: int, files: int) -> None:
        """Ask the workers for `files` rollout files in step k's directory in all."""
        write_json_atomic(self.request_marker(step), {"files": files})

    def requested_files(self, step: int) -> int | None:
        """What the trainer asked step k's directory to hold; None before it asked."""
        try:
            return int(json.loads(self.request_marker(step).read_text())["files"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def rollout_files(self, step: int) -> list[Path]:
        directory = self.rollouts(step)
        return sorted(directory.glob("*.parquet")) if directory.is_dir() else []

    def wants_files(self, step: int) -> bool:
        """Whether step k needs another file: fewer are written than the trainer asked for (or it has not
        asked yet). A worker that sees no need waits instead of generating a file nobody reads."""
        requested = self.requested_files(step)
        return requested is None or len(self.rollout_files(step)) < requested

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


@dataclass
class RunDirSource:
    """A local run: workers write `rollouts/step_k/*.parquet`; a COMPLETE marker closes the step.

    Workers produce only the files a step is expected to need (REQUEST): as many as the previous step read
    (at least `files_per_step`), asked for as soon as that step closes so they generate it while the trainer
    trains; one more whenever the trainer has read every file and still needs groups.
    """

    rundir: RunDir
    files_per_step: int = 1
    _requested: dict[int, int] = field(default_factory=dict)

    def open_step(self, step: int) -> None:
        if step not in self._requested:
            self._request(step, max(self.files_per_step, self.rundir.requested_files(step) or 0))

    def new_files(self, step: int, seen: set[str]) -> list[Path]:
        present = self.rundir.rollout_files(step)
        fresh = [p for p in present if p.name not in seen]
        if not fresh and len(present) >= self._requested.get(step, 0):
            self._request(step, len(present) + 1)
        return fresh

    def close_step(self, step: int, summary: dict[str, Any]) -> None:
        self.rundir.mark_complete(step, summary)
        read = len(summary.get("outcomes", {}))
        self._request(step + 1, max(self.files_per_step, read))

    def workers_idle(self) -> bool:
        """Whether the workers hold every file asked of them: the newest step asked for has them all."""
        if not self._requested:
            return False
        return not self.rundir.wants_files(max(self._requested))

    def _request(self, step: int, files: int) -> None:
        self._requested[step] = files
        self.rundir.request_files(step, files)

    def should_stop(self) -> bool:
        return self.rundir.should_stop()
