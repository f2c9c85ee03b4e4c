import threading

import pytest
from unit.envs.envs_testkit import (
    ENV_MARK,
    STOP,
    CharCodec,
    CountdownEnv,
    ScriptedGenerator,
    encode_turn,
    task,
)

from swarmrl.envs import EnvError, RolloutLimits, Segment, run_episodes, segments_from_mask

ROOMY = RolloutLimits(max_turns=4, max_tokens=200)


def run(scripts, limits=ROOMY, clock=None, envs=None, concurrency=1):
    generator = ScriptedGenerator(scripts)
    envs = envs or [CountdownEnv() for _ in scripts]
    kwargs = {"concurrency": concurrency} if clock is None else {"clock": clock, "concurrency": concurrency}
    out = run_episodes(
        envs,
        [task(i) for i in range(len(scripts))],
        list(range(len(scripts))),
        generator,
        CharCodec(),
        limits,
        **kwargs,
    )
    return out, generator


def test_interleaves_model_and_env_turns_with_a_model_mask():
    (traj,), _ = run([["no", "yes"]])
    assert traj.prompt_ids == [ord("Q"), ord("0")]
    env_turn = [ENV_MARK, *map(ord, "again 1")]
    assert traj.completion_ids == encode_turn("no") + env_turn + encode_turn("yes")
    assert traj.completion_mask == [1, 1, 1] + [0] * len(env_turn) + [1, 1, 1, 1]
    assert traj.completion_logprobs == [-0.5] * 3 + [0.0] * len(env_turn) + [-0.5] * 4
    assert traj.reward == 1.0 and traj.end_reason == "done" and traj.model_turns == 2


def test_rows_advance_in_lock_step_and_finished_rows_leave_the_batch():
    trajs, generator = run([["yes"], ["no", "no", "yes"], ["no", "yes"]])
    assert [len(prefixes) for prefixes, _ in generator.calls] == [3, 2, 1]
    # Round two continues each running row from its whole sequence so far, env turn included.
    assert generator.calls[1][0][0] == trajs[1].prompt_ids + encode_turn("no") + [
        ENV_MARK,
        *map(ord, "again 1"),
    ]
    assert [t.model_turns for t in trajs] == [1, 3, 2]


class MeetingEnv(CountdownEnv):
    """A CountdownEnv whose steps each wait for another row's step to be in flight too (a barrier)."""

    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__()
        self.barrier = barrier

    def step(self, model_turn):
        self.barrier.wait()
        return super().step(model_turn)


def test_a_rounds_environment_steps_run_side_by_side_with_the_same_result():
    scripts = [["no", "yes"], ["no", "yes"]]
    serial, _ = run(scripts)
    barrier = threading.Barrier(2, timeout=10)
    side_by_side, _ = run(scripts, envs=[MeetingEnv(barrier) for _ in scripts], concurrency=2)
    assert [t.completion_ids for t in side_by_side] == [t.completion_ids for t in serial]
    assert [t.reward for t in side_by_side] == [1.0, 1.0]
    # One at a time, the first row's step waits for a second that never comes: the barrier breaks.
    with pytest.raises(threading.BrokenBarrierError):
        run(scripts, envs=[MeetingEnv(threading.Barrier(2, timeout=0.5)) for _ in scripts])


def test_an_environment_error_names_the_first_failing_row_in_order():
    class Failing(CountdownEnv):
        def step(self, model_turn):
            raise EnvError(f"row with turn {model_turn!r} failed")

    with pytest.raises(EnvError, match="'no'"):
        run([["yes"], ["no"]], envs=[CountdownEnv(), Failing()], concurrency=2)


def test_turn_limit_ends_the_episode_without_a_dangling_env_turn():
    (traj,), _ = run([["no"] * 5], RolloutLimits(max_turns=2, max_tokens=200))
    assert traj.end_reason == "max_turns" and traj.model_turns == 2
    assert traj.segments[-1].model and traj.reward == 0.0


def test_token_limit_cuts_the_turn_and_budgets_count_env_tokens():
    limits = RolloutLimits(max_turns=9, max_tokens=14)
    (traj,), generator = run([["no", "a long answer"]], limits)
    # 3 model tokens + 8 env tokens used: the second turn gets 14 - 11 = 3 tokens and ends by length.
    assert generator.calls[1][1] == [3]
    assert traj.end_reason == "length" and len(traj.completion_ids) == 14
    assert traj.completion_ids[-1] != STOP


def test_env_turn_that_does_not_fit_ends_with_max_tokens():
    (traj,), _ = run([["no", "yes"]], RolloutLimits(max_turns=9, max_tokens=10))
    assert traj.end_reason == "max_tokens" and traj.segments[-1].model


def test_timeout_is_checked_after_each_turn():
    ticks = iter([0.0, 5.0, 11.0])
    (traj,), _ = run(
        [["no", "no", "yes"]], RolloutLimits(max_seconds=10, max_tokens=200), lambda: next(ticks)
    )
    assert traj.end_reason == "timeout" and traj.model_turns == 2


def test_segments_from_mask_is_the_inverse_of_the_trajectory_layout():
    (traj,), _ = run([["no", "no", "yes"]])
    again = segments_from_mask(traj.completion_ids, traj.completion_mask, traj.completion_logprobs)
    assert again == traj.segments


@pytest.mark.parametrize(
    "ids, mask, logprobs",
    [([1, 2], [1], [0.0, 0.0]), ([1], [2], [0.0]), ([1], [1, 1], [0.0])],
)
def test_segments_from_mask_rejects_malformed_triples(ids, mask, logprobs):
    with pytest.raises(EnvError):
        segments_from_mask(ids, mask, logprobs)


def test_bad_limits_and_segments_are_refused():
    with pytest.raises(EnvError):
        RolloutLimits(max_turns=0)
    with pytest.raises(EnvError):
        Segment(True, (1, 2), (0.0,))
    with pytest.raises(EnvError):
        Segment(False, (1,), (0.0,))
