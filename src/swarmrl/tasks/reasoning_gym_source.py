"""reasoning-gym generators as task sources (seeded train / held-out splits) and their verifier."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import threading
from pathlib import Path
from typing import Any

from swarmrl.configs.tasks import AnswerExtractionConfig, ReasoningGymSourceConfig
from swarmrl.rundir import write_text_atomic
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.extraction import answer_region
from swarmrl.tasks.task import Task

log = logging.getLogger(__name__)

_DATASET_LOCK = threading.Lock()
# Bumped whenever what a cached split holds, or how a task is made from it, changes.
SPLIT_CACHE_FORMAT = 1


@functools.lru_cache(maxsize=64)
def _cached_dataset(generator: str, seed: int, size: int, kwargs_json: str) -> Any:
    import reasoning_gym

    try:
        return reasoning_gym.create_dataset(generator, seed=seed, size=size, **json.loads(kwargs_json))
    except (ValueError, TypeError, AssertionError, KeyError) as exc:
        raise TaskError(f"reasoning-gym generator {generator!r} rejected its config: {exc}") from exc


def load_generator(generator: str, seed: int, size: int, kwargs: dict[str, Any]) -> Any:
    """The (cached) reasoning-gym dataset object; TaskError when the name or kwargs are wrong."""
    from reasoning_gym.factory import DATASETS

    if generator not in DATASETS:
        raise TaskError(f"unknown reasoning-gym generator {generator!r}")
    with _DATASET_LOCK:
        return _cached_dataset(generator, seed, size, json.dumps(kwargs, sort_keys=True))


def render_prompt(entry: dict[str, Any], template: str) -> str:
    """'question' = the raw question; 'system' = reasoning-gym's default system prompt, then the question;
    otherwise a format string over {question} and the entry's metadata (e.g. '{expression} =')."""
    question = entry["question"]
    if template == "question":
        return question
    if template == "system":
        from reasoning_gym.utils import SYSTEM_PROMPTS

        return f"{SYSTEM_PROMPTS['default']}\n{question}"
    fields = {**entry.get("metadata", {}), "question": question}
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise TaskError(
            f"prompt_template {template!r} does not fit this generator's entries "
            f"(fields: {sorted(fields)}): {exc!r}"
        ) from exc


class ReasoningGymSource:
    """One split of one generator. The train split never contains a question of the held-out split.

    Both splits are drawn from the same generator config with different seeds; because small generators have
    small question spaces (e.g. one-digit sums), the train split additionally drops every entry whose question
    text occurs in the held-out split, so `len(train)` may be smaller than `size`.

    With a `cache` directory the train split's tasks are kept there after they were first drawn, and read back
    from it next time without importing reasoning-gym (whose import alone, sympy and matplotlib included, is
    most of a restarted worker's task set-up). Scoring always regenerates entries (`ReasoningGymVerifier`).
    """

    def __init__(self, config: ReasoningGymSourceConfig, cache: Path | None = None) -> None:
        self.config = config
        self._name = config.name or config.generator
        self._rows: list[list[Any]] | None = None  # [dataset index, prompt, answer] per task, when cached
        if config.split == "eval":
            self._dataset = load_generator(
                config.generator, config.eval_seed, config.eval_size, config.generator_kwargs
            )
            self._indices = list(range(config.eval_size))
            self._seed, self._size = config.eval_seed, config.eval_size
            return
        self._seed, self._size = config.seed, config.size
        key = _split_key(config)
        path = None if cache is None else _split_cache_path(cache, config.generator, key)
        if path is not None and (rows := _read_split(path, key, config.size)) is not None:
            self._rows = rows
            self._indices = [row[0] for row in rows]
            return
        heldout = load_generator(
            config.generator, config.eval_seed, config.eval_size, config.generator_kwargs
        )
        heldout_questions = {heldout[i]["question"] for i in range(config.eval_size)}
        self._dataset = load_generator(config.generator, config.seed, config.size, config.generator_kwargs)
        self._indices = [
            i for i in range(config.size) if self._dataset[i]["question"] not in heldout_questions
        ]
        if path is not None:
            self._write_split(path, key)

    def _write_split(self, path: Path, key: dict[str, Any]) -> None:
        rows = []
        for i in self._indices:
            entry = self._dataset[i]
            rows.append([i, render_prompt(entry, self.config.prompt_template), entry["answer"]])
        try:
            text = json.dumps({"key": key, "rows": rows})
            # Answers JSON cannot hold as they are (tuples) would differ once read back: no cache for them.
            if json.loads(text)["rows"] != rows:
                return
            write_text_atomic(path, text)
        except (OSError, TypeError, ValueError) as exc:  # a full disk, or answers JSON cannot hold: no cache
            log.warning("could not cache the %s split in %s: %s", self._name, path, exc)

    @property
    def name(self) -> str:
        return self._name

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, index: int) -> Task:
        if not 0 <= index < len(self._indices):
            raise IndexError(f"task index {index} out of range for {self._name} ({len(self)} tasks)")
        if self._rows is not None:
            dataset_index, prompt, answer = self._rows[index]
        else:
            dataset_index = self._indices[index]
            entry = self._dataset[dataset_index]
            prompt, answer = render_prompt(entry, self.config.prompt_template), entry["answer"]
        return Task(
            task_id=f"{self._name}/{self.config.split}/{dataset_index}",
            prompt=prompt,
            task_type="reasoning_gym",
            verification_info={
                "generator": self.config.generator,
                "seed": self._seed,
                "size": self._size,
                "kwargs": self.config.generator_kwargs,
                "index": dataset_index,
                "answer": answer,
            },
            demonstration=None
            if answer is None
            else self.config.demonstration_template.format(answer=answer),
        )


def _split_key(config: ReasoningGymSourceConfig) -> dict[str, Any]:
    """What a train split's tasks depend on: the source's config (its weight aside), reasoning-gym's version,
    and the cache format; as JSON reads it back, so a cached file's key compares equal."""
    key = {
        "format": SPLIT_CACHE_FORMAT,
        "reasoning_gym": importlib.metadata.version("reasoning-gym"),
        "source": config.model_dump(mode="json", exclude={"weight"}),
    }
    return json.loads(json.dumps(key))


def _split_cache_path(cache: Path, generator: str, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return cache / "reasoning_gym" / f"{generator}-{digest[:24]}.json"


def _is_row(row: Any, size: int) -> bool:
    return (
        isinstance(row, list)
        and len(row) == 3
        and type(row[0]) is int
        and 0 <= row[0] < size
        and isinstance(row[1], str)
    )


def _read_split(path: Path, key: dict[str, Any], size: int) -> list[list[Any]] | None:
    """The cached split's rows, or None (to draw it again) when there is none or it is not the split of `key`:
    unreadable, of another key, or not rows of (index within `size`, prompt, answer)."""
    try:
        cached = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the cached split %s: %s", path, exc)
        return None
    if not isinstance(cached, dict) or cached.get("key") != key:
        log.warning("ignoring the cached split %s: it is another source's", path)
        return None
    rows = cached.get("rows")
    if not isinstance(rows, list) or not all(_is_row(row, size) for row in rows):
        log.warning("ignoring the cached split %s: its rows are not (index, prompt, answer)", path)
        return None
    return rows


class ReasoningGymVerifier:
    """Scores with the generator's own `score_answer` on the extracted answer (reasoning-gym's [0, 1] scale).

    The entry is regenerated from (generator, seed, size, kwargs, index) rather than read from the task, so a
    tampered `answer` field cannot change the verdict.
    """

    task_type = "reasoning_gym"

    def __init__(self, extraction: AnswerExtractionConfig | None = None) -> None:
        self.extraction = extraction or AnswerExtractionConfig()

    def score(self, task: Task, completion: str) -> float:
        info = task.verification_info
        try:
            generator, seed, size = info["generator"], int(info["seed"]), int(info["size"])
            kwargs, index = info.get("kwargs") or {}, int(info["index"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskError(
                f"task {task.task_id}: reasoning_gym verification_info is malformed: {exc!r}"
            ) from exc
        if not isinstance(kwargs, dict) or not 0 <= index < size:
            raise TaskError(f"task {task.task_id}: reasoning_gym kwargs/index out of range")
        dataset = load_generator(generator, seed, size, kwargs)
        answer = answer_region(completion, self.extraction)
        if not answer:
            return 0.0
        try:
            score = float(dataset.score_answer(answer, dataset[index]))
        except Exception:  # noqa: BLE001 — a scorer choking on a hostile answer means the answer is wrong
            return 0.0
        return min(1.0, max(0.0, score))
