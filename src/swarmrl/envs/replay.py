"""The validator's replay of a multi-turn rollout: every environment turn recomputed, the reward recomputed.

The worker sends the prompt ids, the completion ids with a model-token mask, and logprobs. The validator
resets its own environment with the coordinator's (task, seed), feeds it the model turns exactly as the
mask splits them, runs every tool in its own sandbox, and requires each recorded environment segment to be
the tokens it computed. Any difference is a `ReplayMismatch` whose `check` names it:

  env_prompt_mismatch   the first turn is not what reset() gives for this task
  env_turn_edited       an environment segment differs from the recomputed turn (e.g. an edited tool output)
  env_turn_inserted     an environment segment where none belongs: first, after the episode ended, or after a
                        model turn that never finished
  env_turn_dropped      a model run spans two turns with no environment turn between them, or the rollout
                        stops while the environment still expects a turn and no verifiable limit was reached
  env_tokens_as_model   environment tokens marked as model tokens (so they would be trained on and proven)

Wall-clock timeouts cannot be verified by another node, so only the turn and token limits may end an
episode early.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from swarmrl.envs.base import Environment
from swarmrl.envs.errors import ReplayMismatch
from swarmrl.envs.trajectory import RolloutLimits, TurnCodec, segments_from_mask
from swarmrl.tasks.task import Task

REPLAY_CHECKS = (
    "env_prompt_mismatch",
    "env_turn_edited",
    "env_turn_inserted",
    "env_turn_dropped",
    "env_tokens_as_model",
)


@dataclass(frozen=True)
class ReplayResult:
    reward: float
    model_turns: int


def replay(
    env: Environment,
    task: Task,
    seed: int,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    mask: Sequence[int],
    logprobs: Sequence[float],
    codec: TurnCodec,
    limits: RolloutLimits,
) -> ReplayResult:
    """The trusted reward of a recorded rollout; ReplayMismatch when any environment turn does not replay."""
    expected_prompt = codec.first_ids(env.reset(task, seed))
    if list(prompt_ids) != list(expected_prompt):
        raise ReplayMismatch("env_prompt_mismatch", f"task {task.task_id}: the first turn is not reset()'s")
    segments = segments_from_mask(completion_ids, mask, logprobs)
    if segments and not segments[0].model:
        raise ReplayMismatch("env_turn_inserted", "the completion starts with an environment turn")
    reward, turns, used = 0.0, 0, 0
    index = 0
    while index < len(segments):
        turn = segments[index]
        turns += 1
        used += len(turn.ids)
        stops = [k for k, token in enumerate(turn.ids) if token in codec.stop_token_ids]
        last = index == len(segments) - 1
        if not stops:  # cut by the token budget mid-turn: the environment never saw it
            if not last:
                raise ReplayMismatch(
                    "env_turn_inserted", f"an environment turn follows unfinished turn {turns}"
                )
            return ReplayResult(reward, turns)
        end = stops[0] + 1
        step = env.step(codec.model_text(turn.ids[:end]))
        reward = step.reward
        if end < len(turn.ids):
            expected = codec.env_ids(step.message) if step.message is not None else []
            spill = list(turn.ids[end : end + len(expected)])
            if expected and spill == expected[: len(spill)]:
                raise ReplayMismatch(
                    "env_tokens_as_model", f"turn {turns}: environment tokens marked as model's"
                )
            raise ReplayMismatch(
                "env_turn_dropped", f"turn {turns}: two model turns with no environment turn"
            )
        if step.done:
            if not last:
                raise ReplayMismatch(
                    "env_turn_inserted", f"turns recorded after the episode ended at {turns}"
                )
            return ReplayResult(reward, turns)
        if step.message is None:
            raise ReplayMismatch("env_turn_dropped", "the environment is not done but gave no turn")
        expected = codec.env_ids(step.message)
        if last:
            out_of_tokens = used + len(expected) + 1 > limits.max_tokens
            if turns >= limits.max_turns or out_of_tokens:
                return ReplayResult(reward, turns)
            raise ReplayMismatch(
                "env_turn_dropped", f"the rollout stops after turn {turns} within its limits"
            )
        recorded = segments[index + 1]
        if list(recorded.ids) != expected:
            raise ReplayMismatch("env_turn_edited", f"the environment turn after model turn {turns} differs")
        if index + 2 == len(segments):
            raise ReplayMismatch("env_turn_inserted", "an environment turn ends the rollout")
        used += len(recorded.ids)
        index += 2
    raise ReplayMismatch("env_turn_dropped", "the completion holds no model turn")
