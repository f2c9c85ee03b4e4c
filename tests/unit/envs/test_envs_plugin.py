"""`[env] kind = "plugin"`: the worked example's environment (examples/byo) played by the worker's batch
function and replayed by the validator like a built-in one; found by entry point; pinned by its source."""

import shutil
import sys
from pathlib import Path

import pytest
import torch
from unit.inference.inference_testkit import tiny_model, tiny_tokenizer

from swarmrl.configs import RunConfig
from swarmrl.configs.envs import PluginEnvConfig
from swarmrl.entrypoints import EntryError
from swarmrl.envs.build import TaskVerifier, build_env, generate_config_env_batch, row_replayer
from swarmrl.envs.codec import PromptTurnCodec
from swarmrl.envs.errors import EnvError
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.launch.pins import pin_run_code
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts.assignment import BatchSpec, assigned_prompts
from swarmrl.tasks.registry import build_tasks

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "byo"


@pytest.fixture(autouse=True)
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def guess_config(entry: str = "byo_example.guess:GuessTheNumber", **env) -> RunConfig:
    config = RunConfig.model_validate(
        {
            "env": {"kind": "plugin", "entry": entry, "options": {"max_guesses": 2}, "max_tokens": 24, **env},
            "tasks": {
                "sources": [{"type": "prompts", "name": "sums", "path": str(EXAMPLE / "data" / "sums.jsonl")}]
            },
            "prompt": {"format": "plain"},
            "contract": {"max_new_tokens": 24},
        }
    )
    pin_run_code(config)
    return config


def test_the_plugin_plays_and_the_validator_replays_it():
    torch.manual_seed(0)
    config = guess_config()
    assert config.env.source_hash is not None and len(config.env.source_hash) == 64
    tasks, tokenizer = build_tasks(config.tasks), tiny_tokenizer()
    fmt = prompt_format(tokenizer, config.prompt)
    spec = BatchSpec.local("run", "node", 0, 0, 2, 2, 11)
    prompts = assigned_prompts(spec, tasks, fmt, config.tasks)
    engine = TorchEngine(tiny_model(), policy_step=0)
    params = SamplingParams(max_new_tokens=24, temperature=1.0)
    rows = generate_config_env_batch(engine, spec, prompts, params, config, fmt)
    assert len(rows) == 4 and all(len(r.model_mask) == len(r.completion_ids) for r in rows)
    replay_row = row_replayer(config.env, tasks, PromptTurnCodec(fmt), TaskVerifier(config.tasks))
    assert [replay_row(r) for r in rows] == pytest.approx([r.claimed_reward for r in rows])


def test_the_example_environment_answers_by_the_rules():
    config = guess_config()
    task = build_tasks(config.tasks)[0]  # "11+5=", answer 16
    env = build_env(config.env, TaskVerifier(config.tasks))
    assert env.reset(task, 0) == "11+5="
    assert env.step("12").message == "Higher. Guess again."
    last = env.step("16")
    assert (last.message, last.reward, last.done) == (None, 0.5, True)  # solved at the second guess


def test_an_entry_point_names_the_class(tmp_path, monkeypatch):
    info = tmp_path / "my_envs-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-envs\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[swarmrl.envs]\nguessing = byo_example.guess:GuessTheNumber\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = guess_config("guessing")
    assert type(build_env(config.env, TaskVerifier(config.tasks))).__name__ == "GuessTheNumber"
    with pytest.raises(EntryError, match="environment 'nothing': no installed package declares it"):
        guess_config("nothing")


def test_a_node_with_other_code_refuses_to_play_it(tmp_path, monkeypatch):
    shutil.copy(EXAMPLE / "byo_example" / "guess.py", tmp_path / "guess_copy.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = guess_config("guess_copy:GuessTheNumber")
    (tmp_path / "guess_copy.py").write_text(
        (tmp_path / "guess_copy.py").read_text().replace("Higher.", "Up.")
    )
    with pytest.raises(
        EntryError, match="environment 'guess_copy:GuessTheNumber': the source here .* differs"
    ):
        build_env(config.env, TaskVerifier(config.tasks))
    unpinned = config.env.model_copy(update={"source_hash": None})
    with pytest.raises(EntryError, match="has no source hash in this config"):
        build_env(unpinned, TaskVerifier(config.tasks))
    sys.modules.pop("guess_copy", None)


def test_a_plugin_that_is_not_an_environment_is_named(tmp_path, monkeypatch):
    (tmp_path / "not_env.py").write_text("class Nothing:\n    def __init__(self, **options):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = guess_config("not_env:Nothing")
    with pytest.raises(EnvError, match="has no reset.*and step"):
        build_env(config.env, TaskVerifier(config.tasks))
    with pytest.raises(ValueError, match="entry must be"):
        PluginEnvConfig(kind="plugin", entry="not an entry")
