"""The prompts a pack must not near-duplicate: a run's held-out evals, eval datasets, already admitted packs."""

from __future__ import annotations

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
