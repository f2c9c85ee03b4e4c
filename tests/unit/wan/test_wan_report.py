"""The figures of `demo --wan` from what a run recorded: broadcast times, idle fraction, churn, lost files."""

from __future__ import annotations

import json

import pytest

from swarmrl.configs.wan import ChurnConfig
from swarmrl.coordinator.api import SubmissionInfo
from swarmrl_lab.wan.report import (
    broadcast_bounds,
    broadcast_by_worker,
    broadcast_times,
    churn_figures,
    honest_files_lost,
    joined_outages,
    units_trained_twice,
    worker_idle_fraction,
)
from swarmrl_lab.wan.watch import Holdings, Outage, Published, SwarmWatch, churn_plan


def watch_of(tmp_path, held: dict[str, dict[int, float]], outages: list[Outage] = ()) -> SwarmWatch:
    workers = {name: tmp_path / name / "checkpoints" for name in held if name.startswith("worker-")}
    relays = {name: tmp_path / name for name in held if name.startswith("relay-")}
    holdings = Holdings(tmp_path / "checkpoints", workers, relays)
    holdings.published = {
        step: Published(step, 100.0 * step, 1000, None if step == 0 else 100) for step in range(4)
    }
    holdings.held = held
    return SwarmWatch(holdings=holdings, outages=list(outages))


def test_a_broadcast_lasts_until_the_last_live_worker_holds_it_or_newer(tmp_path):
    watch = watch_of(
        tmp_path,
        {
            "worker-0": {0: 1.0, 1: 102.0, 2: 201.0, 3: 301.0},
            "worker-1": {0: 2.0, 1: 105.0, 3: 330.0},  # skipped 2: holding 3 counts for it
        },
    )
    assert broadcast_times(watch) == {1: 5.0, 2: 130.0, 3: 30.0}
    # each worker's median wait over steps 1-3: 2, 1, 1 → 1; 5, 130, 30 → 30
    assert broadcast_by_worker(watch) == {"worker-0": 1.0, "worker-1": 30.0}


def test_a_worker_killed_before_it_got_a_version_does_not_count_but_one_never_reached_does(tmp_path):
    killed = Outage("worker-1", at_step=1, down_s=100, killed_at=150.0, restarted_at=250.0)
    watch = watch_of(tmp_path, {"worker-0": {1: 101.0, 2: 202.0}, "worker-1": {0: 1.0}}, [killed])
    # Step 1: worker-1 died before it held it; step 2: it was down at publication; step 3: it was up and
    # never got it, an incomplete broadcast (left out).
    assert broadcast_times(watch) == {1: 1.0, 2: 2.0}


def test_a_restarted_worker_joins_the_broadcast_once_it_is_ready_again(tmp_path):
    restarted = Outage("worker-1", at_step=1, down_s=10, killed_at=150.0, restarted_at=160.0)
    held = {"worker-0": {1: 101.0, 2: 201.0, 3: 301.0}, "worker-1": {1: 102.0, 2: 245.0, 3: 303.0}}
    watch = watch_of(tmp_path, held, [restarted])
    (tmp_path / "worker-1").mkdir()
    (tmp_path / "worker-1" / "ready_at").write_text("250.0\n")  # starting from 160 to 250
    joined = joined_outages(watch, tmp_path)
    # Step 2 was published at 200 while worker-1 was still starting: its wait (45 s) is its start-up.
    assert broadcast_times(watch) == {1: 2.0, 2: 45.0, 3: 3.0}
    assert broadcast_times(watch, joined) == {1: 2.0, 2: 1.0, 3: 3.0}
    assert broadcast_by_worker(watch, joined) == {"worker-0": 1.0, "worker-1": 2.5}
    (tmp_path / "worker-1" / "ready_at").write_text("90.0\n")  # never ready after its restart: out for good
    assert broadcast_times(watch, joined_outages(watch, tmp_path)) == {1: 2.0, 2: 1.0, 3: 1.0}


def test_bounds_use_the_delta_and_the_slowest_worker(tmp_path):
    watch = watch_of(tmp_path, {"worker-0": {}, "worker-1": {}})
    bounds = broadcast_bounds(watch, lambda worker, nbytes: nbytes * (2 if worker == "worker-1" else 1))
    assert bounds == {1: 200, 2: 200, 3: 200}


def _units(tmp_path, worker: str, spans: list[tuple[float, float]]) -> None:
    path = tmp_path / worker / "units.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"started": a, "generated": b}) + "\n" for a, b in spans))


def test_idle_fraction_counts_generating_time_over_time_up(tmp_path):
    down = Outage("worker-1", at_step=1, down_s=100, killed_at=200.0, restarted_at=300.0)
    watch = watch_of(tmp_path, {"worker-0": {}, "worker-1": {}}, [down])
    _units(tmp_path, "worker-0", [(50.0, 150.0), (250.0, 260.0)])  # 50 s before the window start at 100
    _units(tmp_path, "worker-1", [(120.0, 180.0)])
    # Window 100..300: worker-0 up 200 s, busy 60 s; worker-1 up 100 s, busy 60 s.
    assert worker_idle_fraction(watch, tmp_path) == pytest.approx(1 - 120 / 300)


def test_churn_counts_kills_and_who_came_back_and_when(tmp_path):
    outages = [
        Outage("worker-0", 1, 5, killed_at=100.0, restarted_at=110.0),
        Outage("worker-1", 1, 5, killed_at=100.0, restarted_at=110.0),
        Outage("relay-0", 2, 5, killed_at=150.0, restarted_at=160.0),
    ]
    watch = watch_of(tmp_path, {"worker-0": {}, "worker-1": {}, "relay-0": {1: 101.0, 2: 201.0}}, outages)
    _units(tmp_path, "worker-0", [(90.0, 95.0), (117.5, 118.0)])
    _units(tmp_path, "worker-1", [(90.0, 95.0)])
    (tmp_path / "worker-0" / "ready_at").write_text("115.0\n")
    (tmp_path / "worker-1" / "ready_at").write_text("80.0\n")  # from before its kill: not back
    figures = churn_figures(watch, tmp_path)
    assert figures["nodes_killed"] == 3 and figures["nodes_rejoined"] == 2
    assert figures["back_to_work_s"] == {"worker-0": 7.5, "worker-1": None, "relay-0": 41.0}
    assert figures["ready_s"] == {"worker-0": 5.0, "worker-1": None}


def _submission(i: int, node: str, step: int, batch: int, status: str, outcome: str | None) -> SubmissionInfo:
    return SubmissionInfo(
        id=i, run_id="r", node_id=node, step=step, sha256="0" * 64, size_bytes=1, rows=1, tokens=1,
        status=status, submitted_at=0.0, file_path="f", batch_index=batch, use_outcome=outcome,
    )  # fmt: skip


def test_lost_honest_files_and_units_trained_twice(tmp_path):
    watch = watch_of(tmp_path, {"worker-0": {}})
    watch.node_ids = {"worker-0": "n0", "cheater-0": "c0"}
    watch.work = {"worker-0": {"submitted": 3, "refused_lease_expired": 1}}
    watch.submissions = [
        _submission(1, "n0", 1, 0, "accepted", "trained"),
        _submission(2, "n0", 1, 1, "accepted", "stale"),
        _submission(3, "n0", 2, 0, "rejected", None),
        _submission(4, "c0", 2, 1, "rejected", None),  # a cheater's loss is no honest loss
        _submission(5, "n0", 1, 0, "accepted", "trained"),
        _submission(6, "n0", 0, 2, "accepted", None),  # its window (steps 0-2) closed before step 3 trained
        _submission(
            7, "n0", 1, 2, "accepted", None
        ),  # step 3 could still have trained it: surplus at the end
    ]
    lost = honest_files_lost(watch, last_step=3, async_level=2)
    assert lost == {"refused_at_submission": 1, "rejected": 1, "stale": 1, "never_trained": 1}
    assert units_trained_twice(watch) == 1


def test_churn_plan_is_a_seeded_draw_within_the_run():
    churn = ChurnConfig(worker_fraction=0.5, relays=1, first_step=2, last_step_margin=3, seed=4)
    workers, relays = [f"worker-{i}" for i in range(6)], ["relay-0", "relay-1"]
    plan = churn_plan(churn, workers, relays, steps=20)
    assert plan == churn_plan(churn, workers, relays, steps=20)
    assert sum(o.role.startswith("worker-") for o in plan) == 3
    assert sum(o.role.startswith("relay-") for o in plan) == 1
    assert all(2 <= o.at_step <= 16 and 3.0 <= o.down_s <= 10.0 for o in plan)
    assert churn_plan(churn, workers, relays, steps=5) == []


def test_a_restarted_worker_is_back_when_it_asks_for_work_a_relay_when_it_mirrors_again():
    from swarmrl_lab.wan.demo import goals

    def result(back: dict, ready: dict) -> dict:
        churn = {"back_to_work_s": back, "ready_s": ready, "nodes_killed": 2, "nodes_rejoined": 1}
        wan = {"honest_files_lost": 0, "units_trained_twice": 0, "broadcast_s": None, "lease_period_s": 16.0}
        return {"wan": {**wan, "churn": churn, "steps_per_min": None}}

    key = "every restarted node back to work within one lease period"
    # Ready in 9 s, no unit left for it before the run ended: back all the same.
    assert goals(result({"worker-1": None, "relay-0": 3.0}, {"worker-1": 9.0}))[key]
    assert not goals(result({"worker-1": 5.0, "relay-0": 3.0}, {"worker-1": 17.0}))[key]
    assert not goals(result({"worker-1": 5.0, "relay-0": None}, {"worker-1": 4.0}))[key]
