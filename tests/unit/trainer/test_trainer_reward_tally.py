"""Each reward function's figures over a step (TRL's rewards/<name>/mean and /std) and the stop, within the
step, when a function fails on more than tasks.reward_failure_share of its completions."""

import dataclasses
import math

import pytest
from unit.spine.test_spine_feed import G, put

from swarmrl.rollouts import RolloutLimits, ScoredRow
from swarmrl.rundir import RunDir, RunDirSource
from swarmrl.trainer.data import RolloutFeed
from swarmrl.trainer.reward_tally import RewardFunctionFailing, RewardTally, mean_and_std
from swarmrl.trainer.train import batch_metrics


def test_mean_and_std_are_trls_nanmean_and_bessel_corrected_nanstd():
    assert mean_and_std([1.0, 0.0, 0.5]) == (0.5, 0.5)  # sqrt((0.25 + 0.25 + 0) / 2)
    assert mean_and_std([2.0]) == (2.0, None)


def scored(function_rewards, failures=None) -> ScoredRow:
    return ScoredRow(
        [1], [2], 0, "t", 0, 0, 0, 1.0, -1, [0.0], "eos",
        function_rewards=function_rewards, reward_failures=failures or {},
    )  # fmt: skip


def test_the_tally_reports_each_function_none_left_out_and_failures_as_a_share():
    tally = RewardTally()
    tally.add(
        [
            scored({"correct": 1.0, "brief": 0.2}),
            scored({"correct": 0.0, "brief": None}),
            scored({"correct": None, "brief": None}, {"correct": "KeyError: 'answer' (task t)"}),
            scored({}),  # a row no reward function scored (an environment's): not counted
        ]
    )
    figures = tally.metrics()
    assert figures == {
        "rewards/correct/mean": 0.5,
        "rewards/correct/std": pytest.approx(math.sqrt(0.5)),
        "rewards/correct/failed": pytest.approx(1 / 3),
        "rewards/brief/mean": 0.2,
        "rewards/brief/failed": 0.0,
    }
    tally.check(step=4, share_limit=0.5)  # 1 of 3 is within a half
    with pytest.raises(RewardFunctionFailing) as refused:
        tally.check(step=4, share_limit=0.1)
    assert str(refused.value) == (
        "step 4: reward function correct failed on 1 of 3 completions (more than tasks.reward_failure_share = "
        "0.1); first: KeyError: 'answer' (task t)"
    )


def failing_scorer(failed_rows: int):
    """Scores by the claimed reward; its function `judge` fails on the first `failed_rows` rows of a file."""

    def score(rows):
        return [
            ScoredRow(
                **dataclasses.asdict(r),
                reward=r.claimed_reward,
                function_rewards={"judge": None if i < failed_rows else r.claimed_reward},
                reward_failures={"judge": "RuntimeError: down (task t)"} if i < failed_rows else {},
            )
            for i, r in enumerate(rows)
        ]

    return score


def feed(tmp_path, scorer, share):
    return RolloutFeed(
        RunDirSource(RunDir(tmp_path), prompts_per_file=1),
        scorer,
        async_level=1,
        group_size=G,
        limits=RolloutLimits(require_proofs=False),
        max_files=16,
        poll_seconds=0.01,
        reward_failure_share=share,
    )


def test_a_step_stops_at_the_first_file_where_a_function_fails_too_often(tmp_path):
    for name in ("a.parquet", "b.parquet", "c.parquet"):  # all equal: without the stop, every file is read
        put(tmp_path, 0, name, 0, [0, 0, 0, 0])
    with pytest.raises(RewardFunctionFailing, match="step 1: reward function judge failed on 4 of 4"):
        feed(tmp_path, failing_scorer(failed_rows=4), share=0.1).collect(0, num_groups=2, max_wait_seconds=5)


def test_failures_within_the_share_train_and_show_in_the_metrics(tmp_path):
    put(tmp_path, 0, "a.parquet", 0, [1, 0, 0, 1, 1, 0, 0, 1])
    rows, stats = feed(tmp_path, failing_scorer(failed_rows=1), share=0.2).collect(
        0, num_groups=4, max_wait_seconds=5
    )
    metrics = batch_metrics(rows, stats)
    assert metrics["rewards/judge/failed"] == pytest.approx(1 / 8)
    assert metrics["rewards/judge/mean"] == pytest.approx(3 / 7)  # the 7 it scored: 0 0 1 1 0 0 1
