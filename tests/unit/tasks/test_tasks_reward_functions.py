"""Reward functions from a user's module: TRL's call (keyword arguments, chat completions, None and weights),
the source-hash pin a run records, and refusals that name the function."""

import itertools
import math

import pytest
from byo_testkit import USER_REWARDS, edit_user_module, write_user_module

from swarmrl.configs import ConfigError, RunConfig
from swarmrl.configs.tasks import PromptsSourceConfig, TasksConfig
from swarmrl.entrypoints import EntryError
from swarmrl.tasks.reward import RewardComputer, RewardRequest
from swarmrl.tasks.reward_functions import RewardFunctions, pin_reward_functions
from swarmrl.tasks.task import Task

_names = itertools.count()

RECORDER = """
CALLS = []

def given(prompts, completions, completion_ids, given, **columns):
    CALLS.append(dict(prompts=prompts, completions=completions, completion_ids=completion_ids, given=given, **columns))
    return [g if g != "nan" else float("nan") for g in given]

def half(completions, **kwargs):
    return [None if "skip" in (c if isinstance(c, str) else c[0]["content"]) else 0.5 for c in completions]

def fragile(completions, **kwargs):
    if any("boom" in c for c in completions):
        raise ValueError("cannot read this")
    return [1.0] * len(completions)

def wrong_length(completions, **kwargs):
    return [1.0]

NOT_CALLABLE = 3
"""


def user_module(tmp_path, monkeypatch, source=USER_REWARDS) -> str:
    name = f"user_rewards_{next(_names)}"
    write_user_module(tmp_path / "user", name, monkeypatch, source)
    return name


def pinned(config: TasksConfig) -> TasksConfig:
    return config.model_copy(update={"reward_function_hashes": pin_reward_functions(config)})


def test_functions_get_trls_keyword_arguments_and_combine_like_trls_nansum(tmp_path, monkeypatch):
    module = user_module(tmp_path, monkeypatch, RECORDER)
    config = pinned(
        TasksConfig(reward_functions=[f"{module}:given", f"{module}:half"], reward_weights=[2.0, -1.0])
    )
    chat = Task(
        "c", "hi", "prompts", {"given": None, "extra": [1]}, messages=({"role": "user", "content": "hi"},)
    )
    tasks = [
        Task("a", "q", "prompts", {"given": 1.0, "other": "x"}),
        Task("b", "q", "prompts", {"given": "nan"}),
        chat,
        Task("d", "q", "prompts", {"given": None}),
    ]
    scores = RewardFunctions(config).score(tasks, ["one", "two", "three", "skip"], [[1], [2, 3], [], [4]])
    # 2·given − 0.5, a None or NaN leaving that function out; no function applies to the last row: 0 (TRL).
    assert scores.totals == [2 * 1.0 - 0.5, -0.5, -0.5, 0.0]
    assert scores.rewards == {"given": [1.0, None, None, None], "half": [0.5, 0.5, 0.5, None]}
    assert scores.failures == {"given": {}, "half": {}}
    call = __import__(module).CALLS[-1]
    assert call["prompts"] == ["q", "q", [{"role": "user", "content": "hi"}], "q"]
    assert call["completions"][:3] == ["one", "two", [{"role": "assistant", "content": "three"}]]
    assert call["completion_ids"] == [[1], [2, 3], [], [4]]
    # Every other column arrives as a list, None where a row lacks it.
    assert call["other"] == ["x", None, None, None] and call["extra"] == [None, None, [1], None]


def test_a_completion_a_function_cannot_score_gets_none_from_it(tmp_path, monkeypatch, caplog):
    module = user_module(tmp_path, monkeypatch, RECORDER)
    config = pinned(TasksConfig(reward_functions=[f"{module}:fragile", f"{module}:wrong_length"]))
    tasks = [Task(str(i), "q", "prompts", {}) for i in range(3)]
    # Batch calls fail, so each completion is scored alone: wrong_length fits a batch of one.
    scores = RewardFunctions(config).score(tasks, ["ok", "boom", "ok"], [[], [], []])
    assert scores.totals == [2.0, 1.0, 2.0]
    assert scores.failures == {"fragile": {1: "ValueError: cannot read this (task 1)"}, "wrong_length": {}}
    # One line per function and batch, however many completions it failed on.
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"reward function {module}:fragile failed on 1 of 3 completions (they get None from it); "
        "first: ValueError: cannot read this (task 1)"
    ]


def test_the_computer_shapes_a_functions_reward_by_length(tmp_path, monkeypatch):
    module = user_module(tmp_path, monkeypatch)
    config = pinned(
        TasksConfig.model_validate(
            {"reward_functions": [f"{module}:format_reward"], "length": {"mode": "exact", "alpha": 0.01}}
        )
    )
    task = Task("t", "q", "prompts", {"solution": "e"})
    computer = RewardComputer(config)
    done = computer.compute_batch(
        [RewardRequest(task, "<answer>x</answer>", 30, 10), RewardRequest(task, "x", 10, 10)]
    )
    assert [(r.task_reward, r.total) for r in done] == [(1.0, pytest.approx(0.8)), (0.0, 0.0)]


def test_a_run_pins_each_functions_source_and_refuses_another(tmp_path, monkeypatch):
    module = user_module(tmp_path, monkeypatch)
    config = TasksConfig(reward_functions=[f"{module}:format_reward", f"{module}:letter_reward"])
    pins = pin_reward_functions(config)
    assert set(pins) == set(config.reward_functions) and all(len(h) == 64 for h in pins.values())
    with pytest.raises(EntryError, match=f"reward function '{module}:format_reward' has no source hash"):
        RewardFunctions(config)
    RewardFunctions(config.model_copy(update={"reward_function_hashes": pins}))
    edit_user_module(tmp_path / "user" / f"{module}.py")
    refused = (
        f"reward function '{module}:format_reward': the source here .* differs from the one the run pinned"
    )
    with pytest.raises(EntryError, match=refused) as caught:
        RewardFunctions(config.model_copy(update={"reward_function_hashes": pins}))
    assert "\n" not in str(caught.value)
    with pytest.raises(EntryError, match=refused):  # a recorded pin is checked, never replaced
        pin_reward_functions(config.model_copy(update={"reward_function_hashes": pins}))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("no_such_module_x:f", "cannot import 'no_such_module_x' (ModuleNotFoundError"),
        ("{module}:missing", "'{module}' has no 'missing'"),
        ("{module}:NOT_CALLABLE", "'{module}:NOT_CALLABLE' is not callable"),
    ],
)
def test_a_function_that_cannot_be_loaded_is_named(tmp_path, monkeypatch, entry, message):
    module = user_module(tmp_path, monkeypatch, RECORDER)
    with pytest.raises(
        EntryError, match=f"reward function .*{message.format(module=module)}".replace("(", r"\(")
    ):
        pin_reward_functions(TasksConfig(reward_functions=[entry.format(module=module)]))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"reward_functions": ["pkg.mod"]}, "not of the form"),
        ({"reward_functions": ["a:f", "a:f"]}, "twice"),
        ({"reward_functions": ["a:f"], "reward_weights": [1.0, 2.0]}, "2 weights for 1"),
        ({"reward_functions": ["a:f"], "reward_weights": [math.inf]}, "finite"),
        ({"reward_functions": ["a:f"], "reward_function_hashes": {"b:g": "0" * 64}}, "'b:g', which is not"),
        ({"reward_functions": ["a:f"], "reward_function_hashes": {"a:f": "abc"}}, "sha256"),
    ],
)
def test_reward_settings_are_checked(fields, message):
    with pytest.raises(ValueError, match=message):
        TasksConfig.model_validate(fields)


def test_a_prompts_source_needs_reward_functions_or_an_environment():
    sources = [{"type": "prompts", "name": "p", "path": "p.jsonl"}]
    with pytest.raises(ConfigError, match="set tasks.reward_functions"):
        RunConfig.model_validate({"tasks": {"sources": sources}})
    RunConfig.model_validate({"tasks": {"sources": sources}, "env": {"kind": "feedback", "max_tokens": 8}})


def test_weights_default_to_one_each():
    assert TasksConfig(reward_functions=["a:f", "b.c:g"]).weights == [1.0, 1.0]
    assert PromptsSourceConfig(name="p", path="x.jsonl").type == "prompts"
