"""The run directory: the only channel between the trainer and local workers (and what a person inspects).

<run>/config.json              resolved config of the run
<run>/checkpoints/step_k/      policy k (HF directory); step_0 is the starting model
<run>/trainer_state/step_k.pt  optimizer, scheduler and RNG for resume
<run>/rollouts/step_k/*.parquet  rollout files produced for training step k
<run>/rollouts/step_k/COMPLETE   written by the trainer once step k has all the data it will use
<run>/rollouts/step_k/REQUEST    the files the trainer expects step k to need (the last maybe smaller); workers
                                stop there
<run>/metrics.jsonl            one JSON object per trainer step
<run>/STOP                     asks every process of the run to finish
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmrl.errors import writing


@dataclass(frozen=True)
class FileRequest:
    """What the trainer asks of step k's directory: `files` rollout files in all, the last of them holding
    `last_file_prompts` prompts (None: as many as the others, `contract.prompts_per_batch`)."""

    files: int
    last_file_prompts: int | None = None

    def __post_init__(self) -> None:
        if self.files < 1 or (self.last_file_prompts is not None and self.last_file_prompts < 1):
            raise ValueError(f"a request asks for at least one file of one prompt, not {self}")

    @classmethod
    def for_prompts(cls, prompts: int, per_file: int, *, after: int = 0, whole: bool = False) -> FileRequest:
        """`prompts` more prompts in files of `per_file` (`whole`: every file full), after the `after` files
        already there."""
        files = max(1, math.ceil(prompts / per_file))
        return cls(after + files, None if whole else max(1, prompts - per_file * (files - 1)))


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

    def request_files(self, step: int, request: FileRequest) -> None:
        """Ask the workers for what `request` says step k's directory should hold in all."""
        write_json_atomic(self.request_marker(step), dataclasses.asdict(request))

    def file_request(self, step: int) -> FileRequest | None:
        """What the trainer asked step k's directory to hold; None before it asked."""
        try:
            data = json.loads(self.request_marker(step).read_text())
            last = data.get("last_file_prompts")
            return FileRequest(int(data["files"]), None if last is None else int(last))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def rollout_files(self, step: int) -> list[Path]:
        directory = self.rollouts(step)
        return sorted(directory.glob("*.parquet")) if directory.is_dir() else []

    def wants_files(self, step: int) -> bool:
        """Whether step k needs another file: fewer are written than the trainer asked for (or it has not
        asked yet). A worker that sees no need waits instead of generating a file nobody reads."""
        request = self.file_request(step)
        return request is None or len(self.rollout_files(step)) < request.files

    def next_file_prompts(self, step: int, full: int) -> int | None:
        """Prompts the next rollout file of step k should hold: `full`, or fewer when it is the last file the
        trainer asked for and that one is smaller; None when the step holds every file asked for."""
        request = self.file_request(step)
        if request is None:
            return full
        present = len(self.rollout_files(step))
        if present >= request.files:
            return None
        if present == request.files - 1 and request.last_file_prompts is not None:
            return min(full, request.last_file_prompts)
        return full

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

    Workers produce only the prompts a step is expected to need (REQUEST), in files of `prompts_per_file`
    with a smaller last one: the feed's estimate for the next step, asked for as soon as a step closes so they
    generate it while the trainer trains; when the trainer has read every file and still lacks groups, its
    estimate for those. Before any estimate, a step asks for `groups_per_step` prompts (every group informative).
    `whole_files`: every file holds `prompts_per_file` (files a validator will judge: `contract.local_proofs`,
    whose assignment check knows whole batches only).
    """

    rundir: RunDir
    groups_per_step: int = 1
    prompts_per_file: int = 1
    whole_files: bool = False
    _requested: dict[int, FileRequest] = field(default_factory=dict)

    def open_step(self, step: int) -> None:
        if step in self._requested:
            return
        # Every group informative: the least a step can need. A restarted trainer keeps what it asked before.
        least = self._for_prompts(self.groups_per_step)
        asked = self.rundir.file_request(step)
        self._request(step, asked if asked is not None and asked.files >= least.files else least)

    def new_files(self, step: int, seen: set[str], prompts_wanted: int) -> list[Path]:
        """The files of step k not in `seen`; none left while the step still wants `prompts_wanted` prompts:
        those are asked for."""
        present = self.rundir.rollout_files(step)
        fresh = [p for p in present if p.name not in seen]
        asked = self._requested.get(step)
        if not fresh and len(present) >= (asked.files if asked is not None else 0):
            self._request(step, self._for_prompts(prompts_wanted, after=len(present)))
        return fresh

    def close_step(self, step: int, summary: dict[str, Any], next_prompts: int) -> None:
        self.rundir.mark_complete(step, summary)
        self._request(step + 1, self._for_prompts(next_prompts))

    def workers_idle(self) -> bool:
        """Whether the workers hold every file asked of them: the newest step asked for has them all."""
        if not self._requested:
            return False
        return not self.rundir.wants_files(max(self._requested))

    def file_prompts(self, prompts_wanted: int) -> int:
        """Prompts of one file written now for a step that still wants `prompts_wanted`: a full file at most,
        and a full file always with `whole_files`."""
        return (
            self.prompts_per_file if self.whole_files else max(1, min(self.prompts_per_file, prompts_wanted))
        )

    def _for_prompts(self, prompts: int, *, after: int = 0) -> FileRequest:
        return FileRequest.for_prompts(prompts, self.prompts_per_file, after=after, whole=self.whole_files)

    def _request(self, step: int, request: FileRequest) -> None:
        self._requested[step] = request
        self.rundir.request_files(step, request)

    def wait_for_files(self, step: int, seconds: float) -> None:
        time.sleep(seconds)  # workers write files without telling

    def should_stop(self) -> bool:
        return self.rundir.should_stop()
