"""The prompts a pack must not near-duplicate: a run's held-out evals, eval datasets, already admitted packs;
and a validator's index of them, kept between checks (`NearDuplicateStore`)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swarmrl.configs.tasks import TasksConfig
from swarmrl.tasks.dataset_source import read_rows
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.packs.near_duplicates import NearDuplicateIndex
from swarmrl.tasks.packs.pack import TaskPack
from swarmrl.tasks.packs.rows import prompt_text
from swarmrl.tasks.registry import heldout_sources


def held_out_index(
    threshold: float,
    tasks: TasksConfig | None = None,
    eval_files: Sequence[Path] = (),
    admitted: Sequence[TaskPack] = (),
) -> NearDuplicateIndex | None:
    """An index of every prompt given, one collection per source; None when there is none to compare with."""
    collections: list[tuple[str, list[str]]] = []
    if tasks is not None:
        for source in heldout_sources(tasks):
            collections.append(
                (f"held-out {source.name}", [prompt_text(source[i]) for i in range(len(source))])
            )
    for path in eval_files:
        rows = enumerate(read_rows(path), start=1)
        collections.append((f"eval {path}", [_row_text(row, path, line) for line, row in rows]))
    for pack in admitted:
        collections.append((f"pack {pack.manifest.label}", [row.prompt_text for row in pack.rows]))
    if not collections:
        return None
    index = NearDuplicateIndex(threshold)
    for name, texts in collections:
        index.add(name, texts)
    return index


def _row_text(row: Any, path: Path, line: int) -> str:
    prompt = row.get("prompt") if isinstance(row, dict) else None
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(
        isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt
    ):
        return "\n".join(message["content"] for message in prompt)
    raise TaskError(f"{path} row {line}: no 'prompt' column (a string or chat messages) to compare with")


class NearDuplicateStore:
    """A validator's index of the prompts every pack is compared with: the run's held-out evals, built once, and
    each pack that passed its checks, added once. Kept on the validator's disk between checks and restarts
    (a pickle the validator wrote itself, under its own work dir: never a file from anyone else)."""

    def __init__(self, path: Path, threshold: float, tasks: TasksConfig | None) -> None:
        self.path, self.threshold, self.tasks = path, threshold, tasks
        held_out = tasks.model_dump(mode="json")["sources"] if tasks is not None else None
        self.key = hashlib.sha256(json.dumps([threshold, held_out], sort_keys=True).encode()).hexdigest()

    def index(self, packs: Sequence[TaskPack]) -> NearDuplicateIndex:
        """The index with the held-out evals and every pack of `packs` in it (those missing added now)."""
        stored = self._load()
        if stored is None:
            base = held_out_index(self.threshold, self.tasks) or NearDuplicateIndex(self.threshold)
            stored = {"key": self.key, "packs": set(), "index": base}
        added = False
        for pack in packs:
            if pack.digest not in stored["packs"]:
                stored["index"].add(f"pack {pack.manifest.label}", [row.prompt_text for row in pack.rows])
                stored["packs"].add(pack.digest)
                added = True
        if added or not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(f".{self.path.name}.part")
            partial.write_bytes(pickle.dumps(stored))
            os.replace(partial, self.path)
        return stored["index"]

    def _load(self) -> dict | None:
        if not self.path.exists():
            return None
        stored = pickle.loads(self.path.read_bytes())
        return stored if stored.get("key") == self.key else None
