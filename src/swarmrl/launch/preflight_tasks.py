"""The preflight of a run's data and rewards: the first rows of every task source read and turned into tasks
(columns, prompt format), and every reward function of yours called on them with sample completions.

Nothing here needs torch; a source a dry run cannot read without the network (a hub dataset) says so.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from importlib.util import find_spec
from itertools import islice
from pathlib import Path

from swarmrl.configs import RunConfig
from swarmrl.configs.tasks import (
    ArithmeticSourceConfig,
    DatasetSourceConfig,
    PromptsSourceConfig,
    ReasoningGymSourceConfig,
    SourceConfig,
)
from swarmrl.errors import UserError
from swarmrl.tasks.task import Task

SAMPLE_ROWS = 3  # dataset rows read and turned into tasks
# What a generated source's preview draws when reward functions need rows to be tried on.
PREVIEW = {"size": SAMPLE_ROWS, "eval_size": 1}


@dataclass
class SourceCheck:
    """One source's line in the report, the task types its first rows have and those rows as tasks."""

    ok: bool
    detail: str
    task_types: set[str] = field(default_factory=set)
    tasks: list[Task] = field(default_factory=list)


def check_source(config: RunConfig, source: SourceConfig) -> SourceCheck:
    try:
        if isinstance(source, ReasoningGymSourceConfig):
            return _reasoning_gym(config, source)
        if isinstance(source, PromptsSourceConfig):
            return _prompts(config, source)
        if isinstance(source, DatasetSourceConfig):
            return _dataset(source)
        return _generated(config, source)
    except UserError as exc:
        return SourceCheck(False, str(exc))


def _reasoning_gym(config: RunConfig, source: ReasoningGymSourceConfig) -> SourceCheck:
    ok, detail = reasoning_gym_generator(source.generator)
    if not ok or not config.tasks.reward_functions:
        return SourceCheck(ok, detail, {"reasoning_gym"})
    return SourceCheck(True, detail, {"reasoning_gym"}, _preview(source))


def _generated(config: RunConfig, source: ArithmeticSourceConfig) -> SourceCheck:
    tasks = _preview(source) if config.tasks.reward_functions else []
    return SourceCheck(True, f"{source.type} (generated)", {"math"}, tasks)


def _preview(source: ReasoningGymSourceConfig | ArithmeticSourceConfig) -> list[Task]:
    from swarmrl.tasks.registry import build_source

    preview = build_source(source.model_copy(update=PREVIEW))
    return [preview[i] for i in range(min(SAMPLE_ROWS, len(preview)))]


def _dataset(source: DatasetSourceConfig) -> SourceCheck:
    from swarmrl.tasks.dataset_source import read_rows, tasks_from_rows

    if source.path is None:
        return SourceCheck(
            True, f"hub dataset {source.hf_dataset} (not read by a dry run: it needs the network)"
        )
    path = Path(source.path)
    rows = list(islice(read_rows(path), SAMPLE_ROWS))
    tasks = tasks_from_rows(
        rows,
        name=source.name,
        origin=str(path),
        default_task_type=source.default_task_type,
        solve_rate_fields=source.solve_rate_fields,
    )
    if not tasks:
        return SourceCheck(False, f"{path}: no rows")
    types = {task.task_type for task in tasks}
    return SourceCheck(
        True,
        f"{path}: columns {', '.join(sorted(rows[0]))}; first {len(tasks)} rows read (task types "
        f"{', '.join(sorted(types))}; first prompt {_shown(tasks[0].prompt)})",
        types,
        tasks,
    )


def _prompts(config: RunConfig, source: PromptsSourceConfig) -> SourceCheck:
    from swarmrl.tasks.prompts_source import first_prompt_rows

    if source.path is None:
        return SourceCheck(
            True, f"hub dataset {source.hf_dataset} (not read by a dry run: it needs the network)"
        )
    rows, tasks, origin = first_prompt_rows(source, SAMPLE_ROWS)
    chat = [task for task in tasks if task.messages is not None]
    columns = sorted({name for row in rows for name in row})
    kind = (
        f"chat prompts ({len(chat[0].messages or ())} messages, ending on a user turn)"
        if chat
        else "text prompts"
    )
    detail = (
        f"{origin}: columns {', '.join(columns)}; first {len(tasks)} rows read, {kind}; first prompt "
        f"{_shown(tasks[0].prompt)}"
    )
    if chat and not renders_chat(config):
        return SourceCheck(
            False,
            f"{origin}: the prompts are chat messages, which the run would render as plain text "
            f"(prompt.format = {config.prompt.format!r}{_template_note(config)}): set prompt.format = 'chat' "
            "with a model whose tokenizer has a chat template",
        )
    return SourceCheck(True, detail, {"prompts"}, tasks)


def renders_chat(config: RunConfig) -> bool:
    """Whether the run's prompts go through a chat template (`prompt.format`, and for 'auto' whether the
    model's tokenizer has one)."""
    if config.prompt.format != "auto":
        return config.prompt.format == "chat"
    return has_chat_template(config)


def has_chat_template(config: RunConfig) -> bool:
    if config.model.path is None:
        return config.model.chat_template != "none"
    path = config.model.path
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    try:
        settings = json.loads((path / "tokenizer_config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(settings, dict) and bool(settings.get("chat_template"))


def _template_note(config: RunConfig) -> str:
    return "; the model's tokenizer has no chat template" if config.prompt.format == "auto" else ""


def _shown(prompt: str) -> str:
    return repr(" ".join(prompt.split())[:60])


def reasoning_gym_generator(generator: str) -> tuple[bool, str]:
    """Whether reasoning-gym is installed and knows `generator` (its registry only: nothing is generated)."""
    if find_spec("reasoning_gym") is None:
        return False, "needs reasoning_gym, which is not installed: pip install 'swarmrl[tasks]'"
    from reasoning_gym.factory import DATASETS

    if generator not in DATASETS:
        close = difflib.get_close_matches(generator, list(DATASETS), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "`swarmrl tasks preview NAME` shows one"
        return False, f"unknown reasoning-gym generator {generator!r} ({hint})"
    return True, f"reasoning-gym {generator!r}"


def reward_function_trials(config: RunConfig, tasks: list[Task]) -> list[tuple[str, bool, str]]:
    """(check name, ok, detail) of each reward function of yours tried on `tasks` (the sources' first rows)."""
    from swarmrl.tasks.reward_check import try_functions
    from swarmrl.tasks.reward_functions import RewardFunctions, RunSchedule

    try:
        functions = RewardFunctions(config.tasks).functions
    except UserError as exc:
        return [("reward functions", False, str(exc))]
    if (
        not tasks
    ):  # a hub dataset, or one whose own check failed: the trainer and validators try them at start
        return [("reward functions", True, "not tried here: no rows of the run's data could be read")]
    schedule = RunSchedule(config.trainer.steps, config.trainer.prompts_per_step, len(tasks))
    return [
        (f"reward function {trial.function.entry}", trial.problem is None, trial.problem or trial.detail)
        for trial in try_functions(functions, tasks, schedule)
    ]
