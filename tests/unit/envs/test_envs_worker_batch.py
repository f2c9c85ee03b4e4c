"""A run with an `[env]` section: the config validates it, and the worker's batch function plays the
configured environment on the real engine, rows the validator's replay reproduces."""

import pytest
import torch
from unit.inference.inference_testkit import tiny_model, tiny_tokenizer

from swarmrl.config import ConfigError, RunConfig
from swarmrl.envs.arithmetic import ArithmeticSource
from swarmrl.envs.build import TaskVerifier, generate_config_env_batch, row_replayer
from swarmrl.envs.codec import PromptTurnCodec
from swarmrl.envs.config import EnvConfig
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.models.prompting import prompt_format
from swarmrl.worker.rollout import BatchSpec, assigned_prompts


def test_a_run_without_an_env_section_stays_single_turn():
    assert RunConfig().env is None


def test_the_env_section_is_validated_and_named():
    config = RunConfig.model_validate({"env": {"kind": "python_tool", "max_turns": 2}})
    assert isinstance(config.env, EnvConfig) and config.env.max_turns == 2
    with pytest.raises(ConfigError, match=r"\[env\]"):
        RunConfig.model_validate({"env": {"kind": "shell"}})
    with pytest.raises(ConfigError, match=r"\[env\]"):
        RunConfig.model_validate({"env": {"kind": "python_tool", "max_turns": 0}})


def test_the_worker_batch_plays_the_configured_environment():
    torch.manual_seed(0)
    config = RunConfig.model_validate(
        {"env": {"kind": "python_tool", "max_turns": 2, "max_tokens": 24}, "prompt": {"format": "plain"}}
    )
    tokenizer = tiny_tokenizer()
    fmt = prompt_format(tokenizer, config.prompt)
    tasks = ArithmeticSource(seed=3, size=4, digits=3)
    spec = BatchSpec.local("run", "node", 0, 0, 2, 2, 11)
    prompts = assigned_prompts(spec, tasks, fmt, config.tasks)
    params = SamplingParams(max_new_tokens=24, temperature=1.0, stop_token_ids=fmt.stop_token_ids)
    rows = generate_config_env_batch(TorchEngine(tiny_model(), policy_step=0), spec, prompts, params, config, fmt)

    assert len(rows) == 4
    assert [r.prompt_ids for r in rows] == [p.prompt_ids for p in prompts for _ in range(2)]
    assert all(len(r.model_mask) == len(r.completion_ids) for r in rows)
    assert len({tuple(r.completion_ids) for r in rows}) > 1  # each row its own seed
    replay_row = row_replayer(config.env, tasks, PromptTurnCodec(fmt), TaskVerifier(config.tasks))
    assert [replay_row(r) for r in rows] == pytest.approx([r.claimed_reward for r in rows])
