"""A validator started from the run's run.toml (no pins) pins the reward functions it has and checks them
against the pins the trainer ships in its signed checkpoints; any difference is one line naming the function."""

import itertools

import pytest
from byo_testkit import USER_REWARDS, edit_user_module, write_user_module

from swarmrl.configs.tasks import TasksConfig
from swarmrl.tasks.reward_functions import RewardFunctionError, pin_reward_functions
from swarmrl.tasks.run_pins import PINS_FILE, adopt_local_pins, check_pins, read_pins, write_pins

_names = itertools.count()


@pytest.fixture
def module(tmp_path, monkeypatch) -> str:
    name = f"pinned_rewards_{next(_names)}"  # a module of its own per test: its source is the test's file
    write_user_module(tmp_path / "user", name, monkeypatch, USER_REWARDS)
    return name


def trainer_checkpoint(tmp_path, tasks: TasksConfig):
    """What `swarmrl sft` prepared (a config with pins) and the trainer shipped in its checkpoint."""
    prepared = tasks.model_copy(update={"reward_function_hashes": pin_reward_functions(tasks)})
    checkpoint = tmp_path / "step_3"
    checkpoint.mkdir()
    write_pins(checkpoint, prepared)
    return checkpoint


def test_the_same_code_from_a_run_toml_is_accepted(tmp_path, module):
    tasks = TasksConfig(reward_functions=[f"{module}:format_reward", f"{module}:letter_reward"])
    checkpoint = trainer_checkpoint(tmp_path, tasks)
    from_toml = TasksConfig(reward_functions=list(tasks.reward_functions))
    assert adopt_local_pins(from_toml) and set(from_toml.reward_function_hashes) == set(
        tasks.reward_functions
    )
    check_pins(from_toml, checkpoint, adopted=True)
    assert read_pins(checkpoint) == from_toml.reward_function_hashes
    assert not adopt_local_pins(from_toml)  # pins already there (a config.json) are kept, and checked too


def test_other_code_or_other_functions_are_refused_by_name(tmp_path, module):
    tasks = TasksConfig(reward_functions=[f"{module}:format_reward"])
    checkpoint = trainer_checkpoint(tmp_path, tasks)
    edit_user_module(tmp_path / "user" / f"{module}.py")  # a pin hashes the source file as it is on disk
    changed = TasksConfig(reward_functions=[f"{module}:format_reward"])
    adopt_local_pins(changed)
    with pytest.raises(
        RewardFunctionError, match=f"'{module}:format_reward': the source here .* differs from"
    ):
        check_pins(changed, checkpoint, adopted=True)
    more = TasksConfig(reward_functions=[f"{module}:format_reward", f"{module}:letter_reward"])
    more.reward_function_hashes = {
        f"{module}:format_reward": read_pins(checkpoint)[f"{module}:format_reward"]
    }
    more.reward_function_hashes[f"{module}:letter_reward"] = "0" * 64
    with pytest.raises(RewardFunctionError, match="letter_reward' is not one of the run's"):
        check_pins(more, checkpoint, adopted=True)
    with pytest.raises(RewardFunctionError, match="format_reward', which this config lacks"):
        check_pins(TasksConfig(), checkpoint, adopted=False)


def test_a_checkpoint_without_pins_or_with_broken_ones(tmp_path, module):
    bare = tmp_path / "bare"
    bare.mkdir()
    tasks = TasksConfig(reward_functions=[f"{module}:format_reward"])
    adopt_local_pins(tasks)
    with pytest.raises(RewardFunctionError, match="carries no swarmrl_pins.json"):
        check_pins(tasks, bare, adopted=True)
    check_pins(tasks, bare, adopted=False)  # a config.json's own pins were checked against the code already
    (bare / PINS_FILE).write_text('{"reward_function_hashes": {"a:f": "not a digest"}}')
    with pytest.raises(RewardFunctionError, match="the trainer's pins cannot be read"):
        read_pins(bare)
