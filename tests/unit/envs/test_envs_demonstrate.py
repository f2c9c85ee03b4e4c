"""SFT demonstrations of a multi-turn run: the reference turns played through the real environment, tokenized
as rollouts are, with the environment's tokens masked out of the loss; the arithmetic source in [tasks]."""

import pytest

from swarmrl.configs.envs import FeedbackEnvConfig, PythonToolEnvConfig
from swarmrl.configs.model import PromptSection
from swarmrl.configs.tasks import TasksConfig
from swarmrl.envs.codec import PromptTurnCodec
from swarmrl.envs.demonstrate import demonstration_examples, model_turns, play_demonstrations
from swarmrl.envs.errors import EnvError
from swarmrl.models.prompting import prompt_format
from swarmrl.tasks.arithmetic import ArithmeticSource
from swarmrl.tasks.registry import build_tasks, heldout_sources
from swarmrl.tasks.task import ListTaskSource, Task
from swarmrl.trainer.sft import sft_batch

TOOL = PythonToolEnvConfig(kind="python_tool")
SOURCE = ArithmeticSource(seed=3, size=4, digits=3)


def test_turns_with_and_without_the_tool():
    task = SOURCE[0]
    truth = task.verification_info["ground_truth"]
    assert model_turns(TOOL, task) == [task.demonstration, f"<answer>{truth}</answer>"]
    no_tool = PythonToolEnvConfig(kind="python_tool", max_tool_calls=0)
    assert model_turns(no_tool, task) == [f"<answer>{truth}</answer>"]
    answer = Task("t", "q", "math", {"ground_truth": "7"}, demonstration="<answer>7</answer>")
    assert (
        model_turns(TOOL, answer)
        == model_turns(FeedbackEnvConfig(kind="feedback"), answer)
        == ["<answer>7</answer>"]
    )
    with pytest.raises(EnvError, match="no demonstration"):
        model_turns(TOOL, Task("t", "q", "math", {}))
    with pytest.raises(EnvError, match="no ground truth"):
        model_turns(no_tool, Task("t", "q", "math", {}, demonstration="```python\nprint(1)\n```"))


def test_played_through_the_sandbox_and_masked_like_a_rollout(math_verifier, chat_tokenizer):
    (demo,) = play_demonstrations(TOOL, math_verifier, SOURCE, limit=1)
    truth = SOURCE[0].verification_info["ground_truth"]
    assert demo.turns == (
        (True, SOURCE[0].demonstration),
        (False, f"<output>\n{truth}\n</output>"),  # the sandbox's real output
        (True, f"<answer>{truth}</answer>"),
    )
    fmt = prompt_format(chat_tokenizer, PromptSection(format="chat"))
    codec = PromptTurnCodec(fmt)
    ((prompt, ids, mask),) = demonstration_examples([demo], fmt, codec)
    env = codec.env_ids(demo.turns[1][1])
    first, last = fmt.completion_ids(demo.turns[0][1]), fmt.completion_ids(demo.turns[2][1])
    assert prompt == codec.first_ids(SOURCE[0].prompt) and ids == first + env + last
    assert mask == [1] * len(first) + [0] * len(env) + [1] * len(last)
    # The SFT labels: the model's tokens only.
    _, _, labels = sft_batch([(prompt, ids, mask)], pad_token_id=0)
    scored = labels[0, len(prompt) :]
    assert scored.tolist() == [t if bit else -100 for t, bit in zip(ids, mask, strict=True)]
    with pytest.raises(ValueError, match="mask bits"):
        sft_batch([(prompt, ids, mask[:-1])], pad_token_id=0)


def test_a_demonstration_that_does_not_solve_its_task_is_refused(math_verifier):
    wrong = Task("t", "What is 2 * 3?", "math", {"ground_truth": "6"}, demonstration="<answer>7</answer>")
    with pytest.raises(EnvError, match="does not solve"):
        play_demonstrations(TOOL, math_verifier, ListTaskSource("w", [wrong]), limit=1)


def test_the_arithmetic_source_in_a_tasks_config_has_a_disjoint_held_out_split():
    config = TasksConfig.model_validate(
        {"sources": [{"type": "arithmetic", "digits": 3, "size": 50, "eval_size": 20}]}
    )
    train, (held,) = build_tasks(config), heldout_sources(config)
    assert len(train) == 50 and len(held) == 20
    assert train[0] == ArithmeticSource(0, 50, 3)[0] and held[0] == ArithmeticSource(1_000_003, 20, 3)[0]
    assert not {train[i].prompt for i in range(50)} & {held[i].prompt for i in range(20)}
    with pytest.raises(ValueError, match="must differ"):
        TasksConfig.model_validate({"sources": [{"type": "arithmetic", "seed": 1, "eval_seed": 1}]})
