"""CPU by role for `demo --wan`: the process table, charging a process to its role, window sums."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from swarmrl_lab.wan.cpu_use import (
    CpuUse,
    ProcessTimes,
    cpu_at,
    cpu_figures,
    process_table,
    role_group,
    role_of,
    same_work_ratio,
    steal_s,
)


def test_the_process_table_holds_this_process_under_its_parent_with_the_cpu_it_used():
    before = time.process_time()
    while time.process_time() - before < 0.05:
        pass
    mine = process_table()[os.getpid()]
    assert mine.parent == os.getppid()
    assert mine.cpu_s >= 0.05


def test_a_process_is_charged_to_the_nearest_role_it_descends_from_else_the_demo():
    table = {
        10: ProcessTimes(1, 0.0),  # the demo
        11: ProcessTimes(10, 0.0),  # a worker it started
        12: ProcessTimes(11, 0.0),  # the worker's own child (a sandbox)
        13: ProcessTimes(10, 0.0),  # `ip`, run by the demo itself
        14: ProcessTimes(99, 0.0),  # someone else's
        20: ProcessTimes(21, 0.0),  # a loop in a stale table
        21: ProcessTimes(20, 0.0),
    }
    roots = {11: "worker-0"}
    assert [role_of(pid, table, roots, demo_pid=10) for pid in (11, 12, 13, 10, 14, 20)] == [
        "worker-0",
        "worker-0",
        "demo",
        "demo",
        None,
        None,
    ]


def test_window_sums_count_a_process_started_inside_it_from_zero_and_one_gone_until_its_last_sample():
    use = CpuUse(roots=dict)
    use.samples = {
        1: [(0.0, 1.0), (1.0, 1.5), (2.0, 2.5), (3.0, 3.0), (4.0, 9.0)],  # up all along
        2: [(2.0, 0.8), (3.0, 1.2)],  # started after the window opened
        3: [(0.0, 5.0), (1.5, 6.0)],  # killed inside the window
        4: [(3.5, 7.0)],  # started after the window closed
    }
    use.roles = {1: "worker-0", 2: "worker-3", 3: "worker-3", 4: "relay-0"}
    assert cpu_at(use.samples[1], 0.5) == 1.0 and cpu_at(use.samples[2], 1.0) == 0.0
    assert use.used_between(1.0, 3.0) == pytest.approx(
        {"worker-0": 1.5, "worker-3": 1.2 + 1.0, "relay-0": 0.0}
    )
    use.steal = [(0.5, 100.0), (2.0, 100.5), (3.0, 101.25)]
    figures = cpu_figures(use, 1.0, 3.0, cores=2)
    assert figures["core_s"] == pytest.approx(3.7)
    assert figures["by_role"] == pytest.approx({"workers": 3.7, "relays": 0.0})
    assert figures["cores_busy"] == pytest.approx(3.7 / 4)
    assert figures["steal_s"] == pytest.approx(1.25)
    assert figures["same_work_s"] == 0.0  # no trainer or validator among these processes
    # steal first read inside the window: its count since boot is no figure for the window
    use.steal = use.steal[1:]
    assert cpu_figures(use, 1.0, 3.0, cores=2)["steal_s"] is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="steal time is counted on Linux")
def test_steal_is_read_as_seconds_since_boot_and_never_goes_back():
    first = steal_s()
    second = steal_s()
    assert first is not None and second is not None
    assert 0.0 <= first <= second


def test_the_same_work_ratio_reads_the_trainer_and_validators_only():
    wan = {"same_work_s": 31.0, "by_role": {"trainer": 12.8, "validators": 18.2, "workers": 22.7}}
    lan = {"same_work_s": 24.2, "by_role": {"trainer": 9.9, "validators": 14.3, "workers": 14.2}}
    assert same_work_ratio(wan, lan) == pytest.approx(31.0 / 24.2)
    assert same_work_ratio(wan, {"same_work_s": 0.0}) is None


def test_role_groups():
    names = ["worker-3", "validator-1", "relay-0", "link-asia", "trainer", "coordinator", "demo"]
    assert [role_group(n) for n in names] == [
        "workers",
        "validators",
        "relays",
        "link proxies",
        "trainer",
        "coordinator",
        "demo",
    ]


def test_a_live_child_is_sampled_from_proc_and_charged_to_its_role():
    burn = "import time\nwhile time.process_time() < 0.4: pass\nprint('done', flush=True)\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        use = CpuUse(roots=lambda: {child.pid: "worker-0"}, period_s=60.0)
        started = time.time()
        use.start()  # samples once at once, then waits out its period
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        use.close()  # the thread stopped, one last sample
        assert use.thread is not None and not use.thread.is_alive()
        used = use.used_between(started - 1.0, time.time() + 1.0)
        assert used["worker-0"] >= 0.35, used
        assert use.roles[child.pid] == "worker-0"
    finally:
        child.kill()
        child.wait(timeout=10)
