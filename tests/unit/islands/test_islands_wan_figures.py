"""The figures of `demo --islands --wan` from an island's metrics and merges.jsonl, against hand-computed values;
a transparent link-proxy listener names its upstream whole or not at all."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from swarmrl.islands.demo import islands_line
from swarmrl.islands.island import merges_log
from swarmrl.rundir import RunDir
from swarmrl_lab.wan.islands import arm_figures, island_figures
from swarmrl_lab.wan.link import Listener, Shape


def _island(
    tmp_path, name: str, steps: list[tuple[int, float, float]], merges: list[tuple[float, float]]
) -> RunDir:
    """steps: (step, time, train_seconds); merges: (seconds, blocked_seconds), one every other step."""
    rundir = RunDir(tmp_path / name)
    rundir.root.mkdir()
    for step, at, train in steps:
        rundir.append_metrics({"step": step, "time": at, "train_seconds": train})
    rundir.append_metrics({"step": 4, "eval/avg@2": 0.5})  # an eval record: no train_seconds, not a step
    lines = [
        {"step": 2 * (i + 1), "seconds": s, "blocked_seconds": b, "wire_bytes": 1000 + i, "committed": True}
        for i, (s, b) in enumerate(merges)
    ]
    merges_log(rundir).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return rundir


def test_utilisation_leaves_out_only_the_time_the_trainer_was_blocked(tmp_path):
    steps = [(1, 100.0, 2.0), (2, 103.0, 4.0), (3, 106.0, 2.0), (4, 109.0, 2.0)]
    rundir = _island(tmp_path, "a", steps, merges=[(3.0, 2.0), (1.5, 0.5)])
    figures = island_figures(1, "asia", rundir)
    assert figures["steps"] == 4 and figures["region"] == "asia"
    assert figures["steps_per_min"] == pytest.approx(60.0 * 3 / 9.0)
    assert figures["train_seconds"] == 10.0 and figures["merge_seconds_total"] == 2.5
    assert figures["utilisation"] == pytest.approx(1 - 2.5 / 10.0)
    # Without the first merge (it also forms the islands' group): 0.5 s blocked of 8 s.
    assert figures["utilisation_after_first_merge"] == pytest.approx(1 - 0.5 / 8.0)
    assert figures["bytes_per_merge"] == 1000.5 and figures["bytes_sent"] == 2001
    assert figures["merges_committed"] == 2 and figures["merges_failed"] == 0


def test_an_arm_reports_its_slowest_island_and_its_later_merges(tmp_path):
    # A step's train_seconds holds the merge that followed it.
    fast = island_figures(
        0, None, _island(tmp_path, "a", [(1, 0.0, 5.0), (2, 5.0, 2.0)], [(4.0, 4.0), (1.0, 1.0)])
    )
    slow = island_figures(
        1, None, _island(tmp_path, "b", [(1, 0.0, 6.0), (2, 6.0, 4.0)], [(5.0, 5.0), (3.0, 0.5)])
    )
    arm = arm_figures([fast, slow], wall_seconds=10.0)
    assert arm["first_merge_seconds"] == 5.0
    assert arm["merge_seconds_median"] == 2.0 and arm["merge_seconds_max"] == 3.0
    assert arm["merge_blocked_seconds_median"] == 0.75
    assert arm["utilisation"] == pytest.approx(1 - 5.0 / 7.0)  # the lowest: 5 s blocked of 7 (5.5 of 10)
    assert arm["bytes_between_islands"] == 2 * 2001 and arm["merges_failed"] == 0


def test_a_listener_names_its_upstream_whole_or_not_at_all():
    shape = Shape(one_way_s=0.05)
    Listener(name="us->eu", listen_host="10.1.0.1", listen_port=21001, shape=shape)  # transparent
    with pytest.raises(ValidationError, match="go together"):
        Listener(
            name="us->x", listen_host="10.1.0.1", listen_port=20000, upstream_host="10.2.0.10", shape=shape
        )


def test_the_islands_demo_off_a_terminal_says_each_islands_step_reward_and_merges(tmp_path):
    islands = [RunDir(tmp_path / "a"), RunDir(tmp_path / "b")]
    for island in islands:
        island.root.mkdir()
    for step, reward in ((1, 0.25), (2, 0.5)):
        islands[0].append_metrics({"step": step, "time": float(step), "sampled_reward": reward})
    assert islands_line(islands) == (
        "island 0: step 2, reward 0.375, 0 merges · island 1: step 0, reward -, 0 merges"
    )
