"""[eval] every_steps / online_num_tasks: off by default, and refused where no online eval could run."""

from pathlib import Path

import pytest

from swarmrl.configs import ConfigError, load_config

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.toml"


def test_online_evals_are_off_by_default_and_take_their_fields():
    assert load_config(DEMO).eval.every_steps == 0
    section = load_config(DEMO, ["eval.every_steps=5", "eval.online_num_tasks=16"]).eval
    assert (section.every_steps, section.online_num_tasks) == (5, 16)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["eval.every_steps=-1"], "every_steps"),
        (["eval.online_num_tasks=0"], "online_num_tasks"),
        (["trainer.steps=4", "eval.every_steps=5"], "eval.every_steps 5 exceeds trainer.steps 4"),
        (
            ["eval.every_steps=2", 'tasks.sources=[{type="dataset",name="d",path="d.jsonl"}]'],
            "needs held-out tasks",
        ),
        (["eval.every_steps=2", "env.kind='feedback'", "env.max_tokens=8"], "multi-turn"),
    ],
)
def test_settings_no_online_eval_could_run_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(DEMO, overrides)


def test_a_dataset_run_without_online_evals_is_still_valid():
    config = load_config(DEMO, ['tasks.sources=[{type="dataset",name="d",path="d.jsonl"}]'])
    assert config.eval.every_steps == 0
