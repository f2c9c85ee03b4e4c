"""SFT demonstrations of a multi-turn run: each task's reference turns played through the run's own environment.

The model turns are the task's demonstration (for the Python tool: its code block) and then the answer; the
environment turns between them are what the environment really answers (the tool runs in its sandbox), so the
warm start sees exactly the sequences rollouts will hold, and learns to read the tool's output. The SFT loss
covers the model's turns only: environment tokens are masked out like the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from swarmrl.configs.envs import EnvConfig, PythonToolEnvConfig
from swarmrl.envs.build import build_env
from swarmrl.envs.errors import EnvError
from swarmrl.envs.python_tool import Verifier
from swarmrl.envs.trajectory import TurnCodec
from swarmrl.models.prompting import PromptFormat
from swarmrl.tasks.extraction import last_python_block
from swarmrl.tasks.task import Task, TaskSource


@dataclass(frozen=True)
class Demonstration:
    question: str
    turns: tuple[tuple[bool, str], ...]  # (model turn?, text), alternating, starting with a model turn

    def text(self) -> str:
        """The whole episode as text (what the tokenizer of a tiny model is trained on)."""
        return "\n".join([self.question, *(text for _, text in self.turns)])


def model_turns(config: EnvConfig, task: Task) -> list[str]:
    """The reference model turns of `task` in this environment.

    A demonstration that is an answer is one turn anywhere. A code demonstration (the Python tool's) is the
    code, then the answer, where there is a tool to run it; without one (`max_tool_calls = 0`, or another
    environment) the model must answer at once, so the demonstration is the answer alone.
    """
    if task.demonstration is None:
        raise EnvError(f"task {task.task_id} has no demonstration")
    if last_python_block(task.demonstration) is None:
        return [task.demonstration]
    if isinstance(config, PythonToolEnvConfig) and config.max_tool_calls > 0:
        return [task.demonstration, answer_turn(task)]
    return [answer_turn(task)]


def answer_turn(task: Task) -> str:
    truth = task.verification_info.get("ground_truth")
    if truth is None:
        raise EnvError(f"task {task.task_id} has no ground truth to demonstrate an answer with")
    return f"<answer>{truth}</answer>"


def play_demonstrations(
    config: EnvConfig, verifier: Verifier, tasks: TaskSource, limit: int
) -> list[Demonstration]:
    """The first `limit` tasks' reference episodes, each played through a fresh environment; every one must
    end solved (reward 1), or the demonstrations would teach a wrong answer."""
    out = []
    for index in range(min(limit, len(tasks))):
        task = tasks[index]
        env = build_env(config, verifier)
        question = env.reset(task, index)
        turns: list[tuple[bool, str]] = []
        reward, done = 0.0, False
        for text in model_turns(config, task):
            if done:
                raise EnvError(f"task {task.task_id}: the episode ended before its demonstration did")
            step = env.step(text)
            turns.append((True, text))
            reward, done = step.reward, step.done
            if step.message is not None:
                turns.append((False, step.message))
        if not done or reward < 1.0:
            raise EnvError(f"task {task.task_id}: its demonstration does not solve it (reward {reward})")
        out.append(Demonstration(question, tuple(turns)))
    return out


def demonstration_examples(
    demonstrations: Sequence[Demonstration], fmt: PromptFormat, codec: TurnCodec
) -> list[tuple[list[int], list[int], list[int]]]:
    """(prompt ids, completion ids, completion mask) per demonstration, tokenized as rollouts are."""
    examples = []
    for demo in demonstrations:
        ids: list[int] = []
        mask: list[int] = []
        for model, text in demo.turns:
            turn = fmt.completion_ids(text) if model else codec.env_ids(text)
            ids += turn
            mask += [int(model)] * len(turn)
        examples.append((codec.first_ids(demo.question), ids, mask))
    return examples
