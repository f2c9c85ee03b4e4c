"""The trainer's rollout feed: the async window, online filtering, and its bounded waits."""

import dataclasses
import json
import logging

import pytest

from swarmrl.identity import Identity
from swarmrl.rollouts import RolloutHeader, RolloutLimits, RolloutRow, ScoredRow, write_rollouts
from swarmrl.rollouts.advantages import prompts_for_groups
from swarmrl.rollouts.errors import RolloutError
from swarmrl.rollouts.io import read_header
from swarmrl.rundir import FileRequest, RunDir, RunDirSource
from swarmrl.trainer.data import NotEnoughRollouts, RolloutFeed, expiring_first

NODE = Identity.from_seed(b"\x09" * 32)
G = 2


def rows_for(policy_step: int, rewards: list[float]) -> list[RolloutRow]:
    return [
        RolloutRow(
            [1],
            [2, 3],
            policy_step,
            f"t{i // G}",
            i // G,
            i // G,
            i,
            1.0,
            -1,
            [-0.5, -0.5],
            "eos",
            [],
            float(r),
        )
        for i, r in enumerate(rewards)
    ]


def claimed_reward_scorer(rows):
    # Stands in for the validator's scorer: the test controls rewards through the claimed column.
    return [
        ScoredRow(**dataclasses.asdict(r), reward=r.claimed_reward, task_reward=r.claimed_reward)
        for r in rows
    ]


def feed(tmp_path, async_level=1, max_files=16, prompts_per_file=1):
    return RolloutFeed(
        RunDirSource(RunDir(tmp_path), prompts_per_file=prompts_per_file),
        claimed_reward_scorer,
        async_level=async_level,
        group_size=G,
        limits=RolloutLimits(require_proofs=False),
        max_files=max_files,
        poll_seconds=0.01,
    )


def put(tmp_path, step, name, policy_step, rewards):
    header = RolloutHeader("run", NODE.node_id, policy_step, 0, proofs=False)
    write_rollouts(RunDir(tmp_path).rollouts(step) / name, header, rows_for(policy_step, rewards), NODE)


def test_stale_files_are_refused_and_named(tmp_path, caplog):
    put(tmp_path, 3, "a-old.parquet", 1, [1, 0, 1, 0])  # 3 - async_level 1 = 2 > 1: too old
    put(tmp_path, 3, "b-fresh.parquet", 2, [1, 0, 0, 1])
    with caplog.at_level(logging.WARNING):
        rows, stats = feed(tmp_path).collect(3, num_groups=2, max_wait_seconds=5)
    assert {r.policy_step for r in rows} == {2}
    assert stats.refused_files == 1 and stats.stale_rows == 4
    assert "a-old.parquet: policy step 1 is older than step 3 - async_level 1" in caplog.text
    assert RunDir(tmp_path).is_complete(3)


def test_zero_variance_groups_are_dropped_until_full(tmp_path):
    put(tmp_path, 0, "a.parquet", 0, [1, 1, 0, 0, 1, 0])  # two uninformative groups, one informative
    put(tmp_path, 0, "b.parquet", 0, [0, 1, 0, 0])
    rows, stats = feed(tmp_path).collect(0, num_groups=2, max_wait_seconds=5)
    assert len(rows) == 2 * G
    assert stats.groups_seen == 4 and stats.groups_dropped == 2
    assert stats.dropped_fraction == pytest.approx(0.5)


def test_gives_up_with_a_reason(tmp_path):
    put(tmp_path, 0, "a.parquet", 0, [1, 1])
    with pytest.raises(NotEnoughRollouts, match="0/1 informative groups after waiting"):
        feed(tmp_path).collect(0, num_groups=1, max_wait_seconds=0.2)
    for i in range(3):
        put(tmp_path, 1, f"{i}.parquet", 0, [0, 0])
    with pytest.raises(NotEnoughRollouts, match="too easy or too hard"):
        feed(tmp_path, max_files=2).collect(1, num_groups=1, max_wait_seconds=5)


def test_tampered_file_is_refused_not_fatal(tmp_path, caplog):
    put(tmp_path, 0, "a.parquet", 0, [1, 0])
    path = RunDir(tmp_path).rollouts(0) / "a.parquet"
    path.write_bytes(path.read_bytes()[:-20])
    put(tmp_path, 0, "b.parquet", 0, [0, 1])
    with caplog.at_level(logging.WARNING):
        rows, stats = feed(tmp_path).collect(0, num_groups=1, max_wait_seconds=5)
    assert stats.refused_files == 1 and "refusing a.parquet" in caplog.text
    assert len(rows) == G


def test_sampled_reward_counts_dropped_groups_too(tmp_path):
    put(tmp_path, 0, "a.parquet", 0, [1, 1, 0, 1])  # one uninformative group (1, 1), one kept (0, 1)
    rows, stats = feed(tmp_path).collect(0, num_groups=1, max_wait_seconds=5)
    assert [r.reward for r in rows] == [0, 1]
    assert stats.sampled_reward == pytest.approx(0.75)


def test_workers_are_asked_for_the_prompts_of_the_groups_still_missing_and_the_next_step_s(tmp_path):
    rundir = RunDir(tmp_path)
    put(tmp_path, 0, "a.parquet", 0, [1, 1, 0, 1, 1, 0, 0, 0])  # 4 groups, 2 informative
    with pytest.raises(NotEnoughRollouts, match="2/6 informative groups after waiting"):
        feed(tmp_path, prompts_per_file=4).collect(0, num_groups=6, max_wait_seconds=0.3)
    # 4 groups missing at the rate of 2 in 4 seen: asked for beside the file already there.
    wanted = prompts_for_groups(4, seen=4, informative=2)
    assert rundir.file_request(0) == FileRequest.for_prompts(wanted, per_file=4, after=1)
    assert rundir.next_file_prompts(0, full=4) == 4

    put(tmp_path, 1, "a.parquet", 1, [1, 1, 0, 1, 0, 1, 1, 0])  # 4 groups, 3 informative
    feed(tmp_path, prompts_per_file=4).collect(1, num_groups=3, max_wait_seconds=5)
    summary = json.loads(rundir.complete_marker(1).read_text())
    assert (summary["groups_seen"], summary["groups_dropped"]) == (4, 1)
    assert rundir.file_request(2) == FileRequest.for_prompts(prompts_for_groups(3, 4, 3), per_file=4)


def test_of_the_files_a_step_does_not_all_need_it_takes_the_oldest_policy_first(tmp_path):
    """A step takes files until it has its groups and leaves the rest for the next step, where a file of the
    oldest policy the window allows now would be too old (WAN run 110: a policy-0 file left behind at step 3
    by the files that arrived before it was refused as stale at step 4). The newer one trains later."""
    put(tmp_path, 3, "a-newer.parquet", 2, [1, 0])
    put(tmp_path, 3, "b-oldest.parquet", 1, [0, 1])  # 3 - async_level 2 = 1: its last step
    rows, stats = feed(tmp_path, async_level=2).collect(3, num_groups=1, max_wait_seconds=5)
    assert {r.policy_step for r in rows} == {1}
    assert stats.outcomes == {"b-oldest.parquet": "trained"}


def test_a_file_whose_header_cannot_be_read_goes_first_and_is_refused_by_name(tmp_path, caplog):
    put(tmp_path, 3, "a-fresh.parquet", 3, [1, 0])
    (RunDir(tmp_path).rollouts(3) / "b-garbage.parquet").write_bytes(b"not parquet at all")
    ordered = expiring_first(sorted(RunDir(tmp_path).rollouts(3).iterdir()), RolloutLimits())
    assert [p.name for p in ordered] == ["b-garbage.parquet", "a-fresh.parquet"]
    with pytest.raises(RolloutError, match="b-garbage.parquet: not a parquet file"):
        read_header(RunDir(tmp_path).rollouts(3) / "b-garbage.parquet")
    with pytest.raises(RolloutError, match="a-fresh.parquet: [0-9]+ bytes exceeds the 100-byte cap"):
        read_header(RunDir(tmp_path).rollouts(3) / "a-fresh.parquet", RolloutLimits(max_file_bytes=100))
    with caplog.at_level(logging.WARNING):
        rows, stats = feed(tmp_path).collect(3, num_groups=1, max_wait_seconds=5)
    assert stats.outcomes == {"b-garbage.parquet": "refused", "a-fresh.parquet": "trained"}
    assert "b-garbage.parquet: not a parquet file" in caplog.text
