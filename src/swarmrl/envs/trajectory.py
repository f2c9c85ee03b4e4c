"""A multi-turn rollout as one interleaved token sequence, and the loop that produces it.

The sequence is the prompt, then alternating model and environment segments. `completion_mask` marks the
tokens the model sampled (1) against the environment's (0): the loss, logprobs, advantages and TOPLOC proofs
cover the model's tokens only, and the environment's tokens are context, the way the prompt is.

`run_episodes` drives many episodes in lock step, one model turn per round for every row still running:
the whole batch generates, then every environment answers, then the next round. A row waiting on its tool
never holds a generation slot, and a finished row drops out of the next round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from swarmrl.envs.base import Environment
from swarmrl.envs.concurrency import submitted
from swarmrl.envs.errors import EnvError
from swarmrl.tasks.task import Task

# Why an episode ended: the environment said so, or a limit cut it, or the model ran out of tokens mid-turn.
END_REASONS = ("done", "max_turns", "max_tokens", "timeout", "length")


@dataclass(frozen=True)
class RolloutLimits:
    """Per-rollout caps: model turns, tokens after the prompt (model and environment), wall seconds."""

    max_turns: int = 4
    max_tokens: int = 512
    max_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_tokens < 1 or not self.max_seconds > 0:
            raise EnvError(f"rollout limits must be positive, got {self}")


@dataclass(frozen=True)
class Segment:
    model: bool
    ids: tuple[int, ...]
    logprobs: tuple[float, ...] = ()  # the model's sampling logprobs; empty for environment segments

    def __post_init__(self) -> None:
        if not self.ids:
            raise EnvError("a segment holds at least one token")
        if self.model and len(self.logprobs) != len(self.ids):
            raise EnvError(f"model segment: {len(self.logprobs)} logprobs for {len(self.ids)} tokens")
        if not self.model and self.logprobs:
            raise EnvError("environment segments carry no logprobs")


@dataclass
class Trajectory:
    prompt_ids: list[int]
    segments: list[Segment] = field(default_factory=list)
    reward: float = 0.0
    end_reason: str = ""
    model_hidden_states: list[Any] = field(default_factory=list)  # per model turn, when the engine gives them

    @property
    def completion_ids(self) -> list[int]:
        return [token for segment in self.segments for token in segment.ids]

    @property
    def completion_mask(self) -> list[int]:
        return [int(segment.model) for segment in self.segments for _ in segment.ids]

    @property
    def completion_logprobs(self) -> list[float]:
        """One per completion token; 0.0 at environment tokens (they are masked out of every use)."""
        out: list[float] = []
        for segment in self.segments:
            out += segment.logprobs if segment.model else [0.0] * len(segment.ids)
        return out

    @property
    def model_turns(self) -> int:
        return sum(segment.model for segment in self.segments)


def segments_from_mask(
    completion_ids: Sequence[int], mask: Sequence[int], logprobs: Sequence[float]
) -> list[Segment]:
    """The segments an on-the-wire (ids, mask, logprobs) triple stands for: each run of equal mask bits."""
    if not len(completion_ids) == len(mask) == len(logprobs):
        raise EnvError(f"ids/mask/logprobs lengths differ: {len(completion_ids)}/{len(mask)}/{len(logprobs)}")
    if any(bit not in (0, 1) for bit in mask):
        raise EnvError("the completion mask holds values other than 0 and 1")
    segments: list[Segment] = []
    start = 0
    for end in range(1, len(mask) + 1):
        if end == len(mask) or mask[end] != mask[start]:
            model = bool(mask[start])
            ids = tuple(int(t) for t in completion_ids[start:end])
            lps = tuple(float(x) for x in logprobs[start:end]) if model else ()
            segments.append(Segment(model, ids, lps))
            start = end
    return segments


class TurnCodec(Protocol):
    """Text turns to token ids and back, for one tokenizer and prompt format."""

    stop_token_ids: tuple[int, ...]

    def first_ids(self, question: str) -> list[int]: ...

    def env_ids(self, message: str) -> list[int]: ...

    def model_text(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class Generation:
    ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "eos" (a stop token ended it) or "length"
    hidden_states: Any = None  # [len(ids), H] the engine's final hidden states, for TOPLOC proofs


# The batch generator: (row indices, each row's prefix, each row's token budget) → one Generation per row.
GenerateBatch = Callable[[list[int], list[list[int]], list[int]], list[Generation]]


def run_episodes(
    envs: Sequence[Environment],
    tasks: Sequence[Task],
    seeds: Sequence[int],
    generate: GenerateBatch,
    codec: TurnCodec,
    limits: RolloutLimits,
    clock: Callable[[], float] = time.monotonic,
    concurrency: int = 1,
) -> list[Trajectory]:
    """Run one episode per row to its end; rows advance together one model turn per round, and the
    environments answer a round's turns up to `concurrency` at a time."""
    if not len(envs) == len(tasks) == len(seeds):
        raise EnvError("run_episodes needs one task and one seed per environment")
    started = clock()
    trajectories = [
        Trajectory(codec.first_ids(env.reset(task, seed)))
        for env, task, seed in zip(envs, tasks, seeds, strict=True)
    ]
    running = list(range(len(envs)))
    while running:
        budgets = [limits.max_tokens - len(trajectories[row].completion_ids) for row in running]
        generations = generate(
            list(running),
            [trajectories[row].prompt_ids + trajectories[row].completion_ids for row in running],
            budgets,
        )
        if len(generations) != len(running):
            raise EnvError(f"the generator answered {len(generations)} rows for {len(running)}")
        for row, generation in zip(running, generations, strict=True):
            trajectory = trajectories[row]
            if not generation.ids:  # every budget is >= 1 token, so this is a generator fault
                raise EnvError(f"the generator returned no tokens for row {row}")
            trajectory.segments.append(Segment(True, tuple(generation.ids), tuple(generation.logprobs)))
            if generation.hidden_states is not None:
                trajectory.model_hidden_states.append(generation.hidden_states)

        def answer(turn: tuple[int, Generation]) -> str | None:
            row, generation = turn
            return _after_model_turn(
                envs[row], trajectories[row], generation, codec, limits, clock() - started
            )

        still: list[int] = []
        with submitted(answer, zip(running, generations, strict=True), concurrency) as reasons:
            for row, reason in zip(running, reasons, strict=True):
                ended = reason.result()
                if ended is None:
                    still.append(row)
                else:
                    trajectories[row].end_reason = ended
        running = still
    return trajectories


def _after_model_turn(
    env: Environment,
    trajectory: Trajectory,
    generation: Generation,
    codec: TurnCodec,
    limits: RolloutLimits,
    elapsed: float,
) -> str | None:
    """Step the environment on the turn just generated; the end reason, or None to keep going."""
    if generation.finish_reason != "eos":
        return "length"  # a turn cut mid-way is not answered: the environment never saw a whole turn
    step = env.step(codec.model_text(generation.ids))
    trajectory.reward = step.reward
    if step.done:
        return "done"
    if trajectory.model_turns >= limits.max_turns:
        return "max_turns"
    if elapsed >= limits.max_seconds:
        return "timeout"
    if step.message is None:
        raise EnvError("an environment that is not done must answer with a message")
    env_ids = codec.env_ids(step.message)
    # The environment's turn plus at least one model token must fit, or the next round could not run.
    if len(trajectory.completion_ids) + len(env_ids) + 1 > limits.max_tokens:
        return "max_tokens"
    trajectory.segments.append(Segment(False, tuple(env_ids)))
    return None
