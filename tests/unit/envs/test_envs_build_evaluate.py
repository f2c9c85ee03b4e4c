"""EnvConfig → environments, held-out accuracy over an engine, and the validator's replay of those rows."""

import re

import pytest
import torch

from swarmrl.configs.envs import PythonToolEnvConfig
from swarmrl.configs.model import PromptSection
from swarmrl.envs.build import row_replayer
from swarmrl.envs.codec import PromptTurnCodec
from swarmrl.envs.engine_rollout import trajectory_row
from swarmrl.envs.evaluate import env_accuracy
from swarmrl.envs.python_tool import TOOL_INSTRUCTIONS
from swarmrl.inference.engine import Generation, SamplingParams
from swarmrl.models.prompting import prompt_format
from swarmrl.tasks.arithmetic import ArithmeticSource


class ToolUsingEngine:
    """Stands for a policy that has learned the tool: asks Python for the product, then copies the output.
    Without a tool turn to read it can only guess (it answers 0)."""

    policy_step = 0

    def __init__(self, codec):
        self.codec = codec
        self.requests = []

    def generate(self, requests, params):
        self.requests.append(requests)
        out = []
        for request in requests:
            text = self.codec.fmt.tokenizer.decode(request.prompt_ids)
            outputs = re.findall(r"<output>\n(.*?)\n</output>", text, re.DOTALL)
            if outputs:
                reply = f"<answer>{outputs[-1]}</answer>"
            elif text.count("<|im_start|>assistant") > 1:  # its code never ran
                reply = "<answer>0</answer>"
            else:
                a, b = re.findall(r"What is (\d+) \* (\d+)\?", text)[-1]
                reply = f"```python\nprint({a} * {b})\n```"
            ids = [
                *self.codec.fmt.tokenizer(reply, add_special_tokens=False).input_ids,
                self.codec.stop_token_ids[0],
            ]
            ids = ids[: request.max_new_tokens]
            out.append(
                Generation(
                    request.prompt_ids,
                    ids,
                    [-0.1] * len(ids),
                    "eos",
                    request.seed,
                    0,
                    torch.zeros(len(ids), 8),
                )
            )
        return out


@pytest.fixture(scope="module")
def codec(chat_tokenizer):
    settings = PromptSection(format="chat", system=TOOL_INSTRUCTIONS)
    return PromptTurnCodec(prompt_format(chat_tokenizer, settings))


TASKS = [ArithmeticSource(seed=9, size=3, digits=5)[i] for i in range(3)]
PARAMS = SamplingParams(max_new_tokens=64)


def test_accuracy_with_and_without_the_tool(math_verifier, codec):
    engine = ToolUsingEngine(codec)
    with_tool = env_accuracy(
        engine, codec, PythonToolEnvConfig(kind="python_tool"), math_verifier, TASKS, PARAMS
    )
    assert with_tool.accuracy == 1.0 and with_tool.mean_model_turns == 2.0
    assert [len(batch) for batch in engine.requests] == [3, 3]
    # Without tool calls a code block is the final turn: no answer, nothing solved.
    without = env_accuracy(
        engine, codec, PythonToolEnvConfig(kind="python_tool", max_tool_calls=0), math_verifier, TASKS, PARAMS
    )
    assert without.accuracy == 0.0 and without.mean_model_turns == 1.0


def test_config_is_strict_and_bounded():
    with pytest.raises(ValueError):
        PythonToolEnvConfig(kind="python_tool", max_turns=0)
    with pytest.raises(ValueError):
        PythonToolEnvConfig(kind="shell")


def test_the_validators_replay_reproduces_the_workers_reward(math_verifier, codec):
    from swarmrl.envs import run_episodes
    from swarmrl.envs.build import build_env, rollout_limits
    from swarmrl.envs.engine_rollout import engine_generator
    from swarmrl.tasks.task import ListTaskSource

    config = PythonToolEnvConfig(kind="python_tool")
    engine = ToolUsingEngine(codec)
    seeds = [1, 2, 3]
    trajectories = run_episodes(
        [build_env(config, math_verifier) for _ in TASKS],
        TASKS,
        seeds,
        engine_generator(engine, PARAMS, seeds),
        codec,
        rollout_limits(config),
    )
    replay_row = row_replayer(config, ListTaskSource("arith", TASKS), codec, math_verifier)
    for i, trajectory in enumerate(trajectories):
        row = trajectory_row(
            trajectory,
            policy_step=0,
            task_id=TASKS[i].task_id,
            prompt_index=i,
            group_id=0,
            sample_seed=seeds[i],
            temperature=1.0,
        )
        assert replay_row(row) == trajectory.reward == 1.0


def test_a_replay_past_its_seconds_is_cut_and_names_the_row():
    import threading
    import time

    from swarmrl.envs.build import replay_rows
    from swarmrl.envs.errors import ReplayBudgetSpent

    started = []
    lock = threading.Lock()

    def slow(row):
        with lock:
            started.append(row)
        time.sleep(0.3)
        return 1.0

    assert replay_rows(slow, [0, 1], concurrency=2, seconds=5.0) == [1.0, 1.0]
    started.clear()
    begin = time.monotonic()
    with pytest.raises(ReplayBudgetSpent, match="row 2") as spent:
        replay_rows(slow, list(range(20)), concurrency=1, seconds=0.75)
    assert spent.value.row == 2
    # Rows not started are cancelled; the one running finishes: about 0.75 s + 0.3 s, not 20 x 0.3 s.
    assert len(started) <= 4
    assert time.monotonic() - begin < 20 * 0.3 / 2
