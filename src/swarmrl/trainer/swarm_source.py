"""The trainer's side of a swarm: accepted submissions in, the step counter out.

The coordinator's step counter is the training step nodes generate for. Opening step k lets nodes work on it
(with a policy no older than k - async_level); closing step k (all its groups collected) opens k + 1 at once,
so nodes generate for k + 1 with policy k while the trainer trains step k. Only submissions a validator
accepted are read; each file is downloaded once into `<run>/accepted/step_k/`, checked against the sha256 the
worker committed to, and then scored again by the trainer's own trusted scorer.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmrl.coordinator.client import CoordinatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.rundir import RunDir, write_json_atomic

log = logging.getLogger(__name__)


@dataclass
class AcceptedSubmissions:
    client: CoordinatorClient
    run_id: str
    rundir: RunDir

    def directory(self, step: int) -> Path:
        return self.rundir.root / "accepted" / f"step_{step}"

    def open_step(self, step: int) -> None:
        if self.client.run_state(self.run_id).current_step < step:
            self.client.publish_step(self.run_id, step)

    def new_files(self, step: int, seen: set[str]) -> list[Path]:
        paths = []
        after_id = 0
        while True:
            page = self.client.accepted_submissions(self.run_id, step, after_id=after_id)
            if not page:
                return paths
            for submission in page:
                name = f"{submission.id:08d}-{submission.node_id[:16]}.parquet"
                if name in seen:
                    continue
                path = self.directory(step) / name
                if not path.exists():
                    try:
                        data = self.client.fetch_submission(submission)
                    except CoordinatorError as exc:
                        log.warning("skipping submission %d: %s", submission.id, exc)
                        continue
                    path.parent.mkdir(parents=True, exist_ok=True)
                    partial = path.with_name(f".{name}.part")
                    partial.write_bytes(data)
                    os.replace(partial, path)
                paths.append(path)
            after_id = page[-1].id

    def close_step(self, step: int, summary: dict[str, Any]) -> None:
        write_json_atomic(self.directory(step) / "COMPLETE", summary)
        self.client.publish_step(self.run_id, step + 1)

    def should_stop(self) -> bool:
        return self.rundir.should_stop()
