import pytest
from pydantic import ValidationError

from swarmrl.configs.tasks import (
    TARGET_LONG,
    DatasetSourceConfig,
    LengthRewardConfig,
    ReasoningGymSourceConfig,
    TasksConfig,
)


def test_defaults_are_valid_and_documented():
    config = TasksConfig()
    assert config.length.targets == [1000, 2000, 3000, 4000, 5000]
    assert config.length.alpha == 0.0003
    for model in (TasksConfig, ReasoningGymSourceConfig, DatasetSourceConfig, LengthRewardConfig):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_sources_parse_by_discriminator():
    config = TasksConfig.model_validate(
        {
            "sources": [
                {"type": "reasoning_gym", "generator": "spell_backward", "weight": 2},
                {"type": "dataset", "name": "m", "path": "x.jsonl"},
            ],
            "length": {"mode": "exact", "targets": TARGET_LONG},
        }
    )
    assert isinstance(config.sources[0], ReasoningGymSourceConfig)
    assert isinstance(config.sources[1], DatasetSourceConfig)


@pytest.mark.parametrize(
    "bad",
    [
        {"sources": [{"type": "reasoning_gym", "generator": "x", "seed": 3, "eval_seed": 3}]},
        {"sources": [{"type": "reasoning_gym", "generator": "x", "prompt_template": "no field"}]},
        {"sources": [{"type": "dataset", "name": "d"}]},
        {"sources": [{"type": "dataset", "name": "d", "path": "a", "hf_dataset": "b"}]},
        {"solve_rate_band": [0.8, 0.1]},
        {"length": {"targets": [0]}},
        {"length": {"prompt_suffix": "no target"}},
        {"unknown_field": 1},
    ],
)
def test_invalid_configs_are_rejected(bad):
    with pytest.raises(ValidationError):
        TasksConfig.model_validate(bad)


def test_task_is_frozen_hashable_and_validated():
    import dataclasses

    from swarmrl.tasks.errors import TaskError
    from swarmrl.tasks.task import Task

    task = Task("t", "p", "math", {"ground_truth": "1"}, 0.5, "1")
    assert {task: 1}[Task("t", "p", "math", {"ground_truth": "1"}, 0.5, "1")] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.prompt = "x"  # type: ignore[misc]
    assert task.with_prompt("q").prompt == "q" and task.with_solve_rate(0.2).solve_rate == 0.2
    for bad in [
        dict(task_id=""),
        dict(prompt=3),
        dict(task_type=""),
        dict(verification_info=[]),
        dict(solve_rate=1.5),
        dict(verification_info={"x": object()}),
    ]:
        fields = {"task_id": "t", "prompt": "p", "task_type": "math", "verification_info": {}, **bad}
        with pytest.raises(TaskError):
            Task(**fields)
