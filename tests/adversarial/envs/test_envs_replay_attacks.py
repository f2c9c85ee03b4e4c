"""A worker that edits a tool's output, inserts or drops a turn, or claims environment tokens as its own is
caught by the validator's replay, which reruns every tool in its own sandbox; each by its named check."""

import pytest

from swarmrl.configs.model import PromptSection
from swarmrl.configs.tasks import CodeRewardConfig
from swarmrl.envs import Generation, ReplayMismatch, RolloutLimits, replay, run_episodes
from swarmrl.envs.codec import PromptTurnCodec
from swarmrl.envs.python_tool import PythonToolEnv
from swarmrl.models.prompting import prompt_format
from swarmrl.tasks.arithmetic import ArithmeticSource
from swarmrl.tasks.math_verifier import MathVerifier
from swarmrl.tasks.sandbox import SandboxLimits, sandbox_plan

LIMITS = RolloutLimits(max_turns=4, max_tokens=400)
TASK = ArithmeticSource(seed=5, size=1)[0]
TRUTH = TASK.verification_info["ground_truth"]


@pytest.fixture(scope="module")
def world(chat_tokenizer):
    codec = PromptTurnCodec(prompt_format(chat_tokenizer, PromptSection(format="chat")))
    verifier = MathVerifier()
    plan = sandbox_plan(CodeRewardConfig())
    yield codec, lambda: PythonToolEnv(verifier, plan, SandboxLimits(wall_seconds=10, cpu_seconds=5))
    verifier.close()


@pytest.fixture(scope="module")
def honest(world):
    """A worker's honest two-turn rollout: one tool call, then the answer."""
    codec, make_env = world
    turns = iter([TASK.demonstration, f"<answer>{TRUTH}</answer>"])

    def generate(rows, prefixes, budgets):
        ids = [*codec.fmt.tokenizer(next(turns), add_special_tokens=False).input_ids, codec.stop_token_ids[0]]
        return [Generation(ids, [-0.1] * len(ids), "eos")]

    (trajectory,) = run_episodes([make_env()], [TASK], [11], generate, codec, LIMITS)
    assert trajectory.reward == 1.0 and trajectory.end_reason == "done"
    return trajectory


def rows(trajectory):
    return (
        list(trajectory.prompt_ids),
        trajectory.completion_ids,
        trajectory.completion_mask,
        trajectory.completion_logprobs,
    )


def check(world, prompt, ids, mask, logprobs):
    codec, make_env = world
    return replay(make_env(), TASK, 11, prompt, ids, mask, logprobs, codec, LIMITS)


def rejected(world, *row):
    with pytest.raises(ReplayMismatch) as caught:
        check(world, *row)
    return caught.value.check


def test_the_honest_rollout_replays_to_the_same_reward(world, honest):
    result = check(world, *rows(honest))
    assert result.reward == 1.0 and result.model_turns == 2


def test_an_edited_tool_output_is_rejected(world, honest):
    prompt, ids, mask, logprobs = rows(honest)
    tokenizer = world[0].fmt.tokenizer
    env = honest.segments[1]
    forged = tokenizer(
        tokenizer.decode(env.ids).replace(TRUTH, str(int(TRUTH) + 1)), add_special_tokens=False
    ).input_ids
    start = len(honest.segments[0].ids)
    ids = ids[:start] + forged + ids[start + len(env.ids) :]
    mask = mask[:start] + [0] * len(forged) + mask[start + len(env.ids) :]
    logprobs = logprobs[:start] + [0.0] * len(forged) + logprobs[start + len(env.ids) :]
    assert rejected(world, prompt, ids, mask, logprobs) == "env_turn_edited"


def test_an_inserted_turn_after_the_end_is_rejected(world, honest):
    prompt, ids, mask, logprobs = rows(honest)
    extra_env, extra_model = honest.segments[1].ids, honest.segments[2].ids
    ids = ids + list(extra_env) + list(extra_model)
    mask = mask + [0] * len(extra_env) + [1] * len(extra_model)
    logprobs = logprobs + [0.0] * len(extra_env) + [-0.1] * len(extra_model)
    assert rejected(world, prompt, ids, mask, logprobs) == "env_turn_inserted"


def test_an_env_turn_before_the_first_model_turn_is_rejected(world, honest):
    prompt, ids, mask, logprobs = rows(honest)
    env = list(honest.segments[1].ids)
    assert rejected(world, prompt, env + ids, [0] * len(env) + mask, [0.0] * len(env) + logprobs) == (
        "env_turn_inserted"
    )


def test_a_dropped_env_turn_is_rejected(world, honest):
    prompt, _, _, _ = rows(honest)
    first, second = honest.segments[0], honest.segments[2]
    ids = list(first.ids + second.ids)
    assert rejected(world, prompt, ids, [1] * len(ids), [-0.1] * len(ids)) == "env_turn_dropped"


def test_a_rollout_cut_short_within_its_limits_is_rejected(world, honest):
    prompt, _, _, _ = rows(honest)
    first = honest.segments[0]
    assert rejected(world, prompt, list(first.ids), [1] * len(first.ids), [-0.1] * len(first.ids)) == (
        "env_turn_dropped"
    )


@pytest.mark.parametrize("how_many", [1, None])
def test_env_tokens_claimed_as_model_tokens_are_rejected(world, honest, how_many):
    prompt, ids, mask, logprobs = rows(honest)
    start = len(honest.segments[0].ids)
    flip = len(honest.segments[1].ids) if how_many is None else how_many
    mask = mask[:start] + [1] * flip + mask[start + flip :]
    assert rejected(world, prompt, ids, mask, logprobs) == "env_tokens_as_model"


def test_a_changed_first_turn_is_rejected(world, honest):
    prompt, ids, mask, logprobs = rows(honest)
    assert rejected(world, prompt[:-1], ids, mask, logprobs) == "env_prompt_mismatch"
