"""Reward functions tried before a run (the preflight the launcher, the trainer and each validator run) and
called during it: TRL's own reward functions pass and score as TRL scores them, `async def` functions are
awaited, `trainer_state` holds what every judge computes alike, and each broken case of issue 59 is refused in
one line naming the function and why."""

import itertools

import pytest
from byo_testkit import write_user_module

from swarmrl.configs.tasks import TasksConfig
from swarmrl.tasks.reward_check import check_reward_functions, try_functions
from swarmrl.tasks.reward_functions import (
    JudgeState,
    RewardFunctionError,
    RewardFunctions,
    RunSchedule,
    metric_names,
    pin_reward_functions,
)
from swarmrl.tasks.task import ListTaskSource, Task

_names = itertools.count()

BROKEN = """
import asyncio
from trl.rewards import get_repetition_penalty_reward, get_soft_overlong_punishment

overlong = get_soft_overlong_punishment(max_completion_len=8, soft_punish_cache=4)
repetition = get_repetition_penalty_reward(ngram_size=2, max_penalty=-1.0)

def _text(c):
    return c[0]["content"] if isinstance(c, list) else c

async def judge(completions, **kwargs):
    await asyncio.sleep(0)
    return [1.0 if "4" in _text(c) else 0.0 for c in completions]

def staged(completions, trainer_state, **kwargs):
    return [trainer_state.global_step / trainer_state.max_steps + trainer_state.epoch for _ in completions]

def history(completions, trainer_state, **kwargs):
    return [float(len(trainer_state.log_history)) for _ in completions]

def misspelled(completions, completions_ids, **kwargs):
    return [0.0 for _ in completions]

def wants_answer(completions, answer, **kwargs):
    return [float(a in _text(c)) for c, a in zip(completions, answer)]

def reads_answer(completions, **kwargs):
    return [float(a in _text(c)) for c, a in zip(completions, kwargs["answer"])]

def one_number(completions, **kwargs):
    return 1.0

def short(completions, **kwargs):
    return [1.0]

def words(completions, **kwargs):
    return ["high" for _ in completions]

def raises(completions, **kwargs):
    raise RuntimeError("the judge is down")

def no_kwargs(completions, solution):
    return [1.0 for _ in completions]

def logs(completions, log_metric, log_extra, **kwargs):
    log_metric("seen", float(len(completions)))
    log_extra("lengths", [len(_text(c)) for c in completions])
    return [0.5 for _ in completions]
"""


def chat_task(index: int, solution: str = "4") -> Task:
    question = f"{index}+{4 - index}?"
    return Task(
        f"d/{index}",
        question,
        "prompts",
        {"solution": solution},
        messages=({"role": "user", "content": question},),
    )


TASKS = [chat_task(i) for i in range(4)]


def functions(tmp_path, monkeypatch, *names: str, source: str = BROKEN) -> RewardFunctions:
    module = f"broken_rewards_{next(_names)}"
    write_user_module(tmp_path / "user", module, monkeypatch, source)
    entries = [name if ":" in name else f"{module}:{name}" for name in names]
    config = TasksConfig(reward_functions=entries)
    return RewardFunctions(config.model_copy(update={"reward_function_hashes": pin_reward_functions(config)}))


SCHEDULE = RunSchedule(max_steps=10, prompts_per_step=2, num_tasks=4)


def test_trls_own_reward_functions_pass_the_preflight(tmp_path, monkeypatch):
    loaded = functions(
        tmp_path,
        monkeypatch,
        "trl.rewards:accuracy_reward",
        "trl.rewards:think_format_reward",
        "overlong",
        "repetition",
    )
    trials = try_functions(loaded.functions, TASKS, SCHEDULE)
    assert [t.problem for t in trials] == [None] * 4, [t.line() for t in trials]
    assert [f.name for f in loaded.functions] == [
        "accuracy_reward",
        "think_format_reward",
        "overlong",
        "repetition",
    ]


def test_trls_functions_score_as_trl_documents_them(tmp_path, monkeypatch):
    loaded = functions(
        tmp_path, monkeypatch, "trl.rewards:accuracy_reward", "trl.rewards:think_format_reward", "overlong"
    )
    texts = [r"<think>sum</think>My answer is \boxed{4}", r"My answer is \boxed{5}"]
    ids = [[1] * 3, [1] * 6]  # overlong: 0 up to 8 - 4 tokens, then -1/4 per token past it
    scores = loaded.score(TASKS[:2], texts, ids)
    assert scores.rewards == {
        "accuracy_reward": [1.0, 0.0],
        "think_format_reward": [1.0, 0.0],
        "overlong": [0.0, -0.5],
    }
    assert scores.totals == [2.0, -0.5] and scores.failures == {name: {} for name in scores.rewards}


def test_an_async_function_is_awaited(tmp_path, monkeypatch):
    loaded = functions(tmp_path, monkeypatch, "judge")
    assert loaded.score(TASKS[:2], ["4", "five"], [[1], [2]]).rewards == {"judge": [1.0, 0.0]}


def test_trainer_state_is_each_completions_policy_step_for_every_judge(tmp_path, monkeypatch):
    loaded = functions(tmp_path, monkeypatch, "staged")
    states = [SCHEDULE.state(2), SCHEDULE.state(2), SCHEDULE.state(5)]
    scores = loaded.score(TASKS[:3], ["a", "b", "c"], [[1], [1], [1]], states)
    # global_step / max_steps + epoch, epoch = step × prompts_per_step / tasks.
    assert scores.rewards["staged"] == [0.2 + 1.0, 0.2 + 1.0, 0.5 + 2.5]
    assert SCHEDULE.state(5) == JudgeState(global_step=5, max_steps=10, epoch=2.5)


def test_trainer_state_fields_no_validator_can_compute_are_refused_by_name(tmp_path, monkeypatch):
    loaded = functions(tmp_path, monkeypatch, "history")
    (trial,) = try_functions(loaded.functions, TASKS, SCHEDULE)
    assert trial.problem is not None and "trainer_state.log_history is not passed" in trial.problem
    with pytest.raises(AttributeError, match="best_metric is not passed"):
        _ = SCHEDULE.state(0).best_metric


def test_trls_logging_hooks_are_passed(tmp_path, monkeypatch):
    loaded = functions(tmp_path, monkeypatch, "logs")
    assert loaded.score(TASKS[:2], ["a", "b"], [[1], [1]]).rewards == {"logs": [0.5, 0.5]}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("misspelled", "its parameter 'completions_ids' is never passed: did you mean 'completion_ids'?"),
        ("wants_answer", "its parameter 'answer' is never passed: the data's columns are solution;"),
        (
            "reads_answer",
            "raised KeyError: 'answer': 'answer' is not a column of the data (its columns: solution)",
        ),
        ("one_number", "returned float, not a list of 8 rewards"),
        ("short", "returned 1 rewards for 8 completions"),
        ("words", "returned 'high' (str), not a number or None"),
        ("raises", "raised RuntimeError: the judge is down"),
        (
            "no_kwargs",
            "it takes no **kwargs, but every call also passes prompts, completion_ids, trainer_state",
        ),
    ],
)
def test_each_broken_function_is_refused_in_one_line_naming_it(tmp_path, monkeypatch, name, why):
    loaded = functions(tmp_path, monkeypatch, name)
    (trial,) = try_functions(loaded.functions, TASKS, SCHEDULE)
    assert trial.problem is not None and why in trial.problem, trial.problem
    line = trial.line()
    assert line.startswith(f"reward function {loaded.functions[0].entry}: ") and "\n" not in line


def test_a_trainer_or_validator_refuses_at_start(tmp_path, monkeypatch):
    """`check_reward_functions` is what the trainer's scorer and each validator call before judging."""
    from swarmrl.configs import RunConfig

    module = f"broken_rewards_{next(_names)}"
    write_user_module(tmp_path / "user", module, monkeypatch, BROKEN)
    tasks = {"reward_functions": [f"{module}:judge", f"{module}:wants_answer"]}
    config = RunConfig.model_validate({"tasks": tasks})
    config.tasks.reward_function_hashes = pin_reward_functions(config.tasks)
    with pytest.raises(RewardFunctionError, match=f"reward function {module}:wants_answer: its parameter"):
        check_reward_functions(config, ListTaskSource("d", TASKS))


def test_metric_names_are_the_attributes_unless_two_share_one():
    assert metric_names(["a.b:correct", "c:Judge.score"]) == ["correct", "score"]
    assert metric_names(["a:f", "b.c:f"]) == ["a:f", "b.c:f"]
