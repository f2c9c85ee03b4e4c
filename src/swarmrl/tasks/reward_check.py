"""Reward functions tried before a run: each one is called, as the run will call it, on a handful of the run's
real rows with sample completions, so that a function that cannot score them — a parameter no call passes, a
column the data lacks, an exception, a return value that is not one reward per completion — is refused by name
in one line before the first step, instead of scoring 0 for every completion of the run.

The launcher's preflight (`--dry-run`, `rl`, `demo`, `sft`), the trainer and every validator run it at start.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

from swarmrl.configs.run import RunConfig
from swarmrl.tasks.reward import reward_computer
from swarmrl.tasks.reward_functions import (
    CALL_ARGUMENTS,
    RESERVED_COLUMNS,
    WHAT,
    Function,
    RewardFunctionError,
    RunSchedule,
    call_function,
    describe_error,
    trl_arguments,
)
from swarmrl.tasks.task import Task, TaskSource

SAMPLE_TASKS = 4  # rows of the run's data each function is tried on
THINK = "<think>\nLet me work it out step by step.\n</think>\n"


@dataclass(frozen=True)
class Trial:
    """How one function did on the sample: `problem` (one line) when it cannot score the run's completions."""

    function: Function
    problem: str | None
    detail: str

    def line(self) -> str:
        return f"{WHAT} {self.function.entry}: {self.problem or self.detail}"


def sample_completions(tasks: Sequence[Task]) -> tuple[list[Task], list[str], list[list[int]]]:
    """Two completions per task, as a policy might write them: its demonstration (or a number) bare, and after
    a closed think block. Their ids are the text's UTF-8 bytes: lengths of the right order, no tokenizer."""
    repeated, texts = [], []
    for task in tasks:
        answer = task.demonstration or "42"
        for text in (answer, THINK + answer):
            repeated.append(task)
            texts.append(text)
    return repeated, texts, [list(text.encode()) for text in texts]


def columns_of(tasks: Sequence[Task]) -> list[str]:
    """The dataset columns a call over `tasks` passes, in first-seen order."""
    seen: dict[str, None] = {}
    for task in tasks:
        seen.update(dict.fromkeys(n for n in task.verification_info if n not in RESERVED_COLUMNS))
    return list(seen)


def signature_problem(function: Function, columns: Sequence[str]) -> str | None:
    """What in the function's parameters no call can satisfy: a required parameter never passed (a misspelled
    argument, a column the data lacks), a positional-only one, or arguments it cannot take (no **kwargs)."""
    try:
        parameters = list(inspect.signature(function.call).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable: the call itself will tell
        return None
    passed = [*CALL_ARGUMENTS, *columns]
    for parameter in parameters:
        required = parameter.default is inspect.Parameter.empty
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY and required:
            return f"its parameter {parameter.name!r} is positional-only; rewards are called with keywords"
        keyword = parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        if keyword and required and parameter.name not in passed:
            return f"its parameter {parameter.name!r} is never passed: {_what_is_passed(parameter.name, columns)}"
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    taken = {p.name for p in parameters}
    extra = [name for name in passed if name not in taken]
    if extra:
        return (
            f"it takes no **kwargs, but every call also passes {', '.join(extra)} (as TRL's does): "
            "add **kwargs to its parameters"
        )
    return None


def _what_is_passed(name: str, columns: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, [*CALL_ARGUMENTS, *columns], n=1, cutoff=0.8)
    hint = f"did you mean {close[0]!r}? " if close else ""
    data = f"the data's columns are {', '.join(columns)}" if columns else "the data has no other columns"
    return f"{hint}{data}; every call passes {', '.join(CALL_ARGUMENTS)} and the columns"


def try_function(function: Function, tasks: Sequence[Task], schedule: RunSchedule | None) -> Trial:
    """Call `function` once over sample completions of `tasks`, as a step's scoring calls it."""
    columns = columns_of(tasks)
    problem = signature_problem(function, columns)
    if problem is not None:
        return Trial(function, problem, "")
    repeated, texts, ids = sample_completions(tasks)
    state = schedule.state(0) if schedule is not None else None
    try:
        rewards = call_function(function, trl_arguments(repeated, texts, ids, state), len(texts))
    except Exception as exc:  # noqa: BLE001 — user code
        return Trial(function, f"on {len(tasks)} rows of the run's data it {_failure(exc, columns)}", "")
    given = [r for r in rewards if r is not None]
    shown = f"rewards {min(given):g} to {max(given):g}" if given else "None for each (it applies to none)"
    return Trial(function, None, f"{len(texts)} sample completions of {len(tasks)} rows: {shown}")


def _failure(exc: BaseException, columns: Sequence[str]) -> str:
    if isinstance(exc, KeyError) and exc.args and exc.args[0] not in (*CALL_ARGUMENTS, *columns):
        return (
            f"raised {describe_error(exc)}: {exc.args[0]!r} is not a column of the data ({_columns(columns)})"
        )
    if isinstance(exc, TypeError | ValueError) and str(exc).startswith("returned "):
        return str(exc)
    return f"raised {describe_error(exc)}"


def _columns(columns: Sequence[str]) -> str:
    return f"its columns: {', '.join(columns)}" if columns else "it has no columns but the prompt"


def try_functions(
    functions: Sequence[Function], tasks: Sequence[Task], schedule: RunSchedule | None
) -> list[Trial]:
    return [try_function(function, tasks, schedule) for function in functions]


def refuse_failing(trials: Sequence[Trial]) -> None:
    """RewardFunctionError with the first refused function's line."""
    for trial in trials:
        if trial.problem is not None:
            raise RewardFunctionError(trial.line())


def first_tasks(tasks: TaskSource, count: int = SAMPLE_TASKS) -> list[Task]:
    return [tasks[i] for i in range(min(count, len(tasks)))]


def check_reward_functions(config: RunConfig, tasks: TaskSource) -> None:
    """At a trainer's or validator's start: the run's reward functions (pinned and imported) tried on the first
    rows of its task source; RewardFunctionError naming the first that cannot score them."""
    functions = reward_computer(config.tasks).functions
    if functions is not None:
        schedule = RunSchedule.of(config, len(tasks))
        refuse_failing(try_functions(functions.functions, first_tasks(tasks), schedule))
