"""A run with an `[env]` section: the config validates it, and the worker's batch function plays the
configured environment on the real engine, rows the validator's replay reproduces."""

import dataclasses
import functools

import pytest
import torch
from unit.inference.inference_testkit import tiny_model, tiny_tokenizer

from swarmrl.configs import ConfigError, RunConfig, load_config
from swarmrl.configs.envs import PythonToolEnvConfig
from swarmrl.envs.build import TaskVerifier, generate_config_env_batch, row_replayer, with_env_replay
from swarmrl.envs.codec import PromptTurnCodec
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts import RolloutError
from swarmrl.rollouts.assignment import BatchSpec, assigned_prompts
from swarmrl.rollouts.scoring import score_rows
from swarmrl.tasks.arithmetic import ArithmeticSource


def test_a_run_without_an_env_section_stays_single_turn():
    assert RunConfig().env is None


def test_the_env_section_is_validated_and_named():
    config = RunConfig.model_validate(
        {"env": {"kind": "python_tool", "max_turns": 2, "max_tokens": 64}, "contract": {"max_new_tokens": 64}}
    )
    assert isinstance(config.env, PythonToolEnvConfig) and config.env.max_turns == 2
    with pytest.raises(ConfigError, match=r"^env: .*'kind'"):
        load_config(None, ["env.kind='shell'"])
    with pytest.raises(ConfigError, match=r"env\.python_tool\.max_turns"):
        load_config(None, ["env.kind='python_tool'", "env.max_turns=0"])
    with pytest.raises(ConfigError, match="env.max_tokens 600 exceeds contract.max_new_tokens 64"):
        RunConfig.model_validate(
            {"env": {"kind": "python_tool", "max_tokens": 600}, "contract": {"max_new_tokens": 64}}
        )


CONFIG = RunConfig.model_validate(
    {
        "env": {"kind": "python_tool", "max_turns": 2, "max_tokens": 24},
        "prompt": {"format": "plain"},
        "contract": {"max_new_tokens": 24},
    }
)
TASKS = ArithmeticSource(seed=3, size=4, digits=3)


@pytest.fixture(scope="module")
def played():
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer()
    fmt = prompt_format(tokenizer, CONFIG.prompt)
    spec = BatchSpec.local("run", "node", 0, 0, 2, 2, 11)
    prompts = assigned_prompts(spec, TASKS, fmt, CONFIG.tasks)
    params = SamplingParams(max_new_tokens=24, temperature=1.0)  # as the worker builds them
    engine = TorchEngine(tiny_model(), policy_step=0)
    return tokenizer, fmt, prompts, generate_config_env_batch(engine, spec, prompts, params, CONFIG, fmt)


def test_the_worker_batch_plays_the_configured_environment(played):
    _, fmt, prompts, rows = played
    assert len(rows) == 4
    assert [r.prompt_ids for r in rows] == [p.prompt_ids for p in prompts for _ in range(2)]
    assert all(len(r.model_mask) == len(r.completion_ids) for r in rows)
    assert len({tuple(r.completion_ids) for r in rows}) > 1  # each row its own seed
    replay_row = row_replayer(CONFIG.env, TASKS, PromptTurnCodec(fmt), TaskVerifier(CONFIG.tasks))
    assert [replay_row(r) for r in rows] == pytest.approx([r.claimed_reward for r in rows])


def trainer_scorer(tokenizer):
    score = functools.partial(
        score_rows, tasks=TASKS, tokenizer=tokenizer, tasks_config=CONFIG.tasks, group_size=2
    )
    return with_env_replay(score, CONFIG, TASKS, tokenizer)


def test_the_trainer_scores_env_rows_by_its_own_replay(played):
    tokenizer, _, _, rows = played
    scored = trainer_scorer(tokenizer)(rows)
    assert [s.reward for s in scored] == pytest.approx([r.claimed_reward for r in rows])


def test_the_trainer_refuses_a_row_that_claims_other_model_tokens(played):
    tokenizer, _, _, rows = played
    row = next(r for r in rows if len(r.completion_ids) >= 3)
    forged = dataclasses.replace(row, completion_mask=[1] + [0] * (len(row.completion_ids) - 2) + [1])
    with pytest.raises(RolloutError, match="environment replay: env_turn_inserted"):
        trainer_scorer(tokenizer)([forged if r is row else r for r in rows])
