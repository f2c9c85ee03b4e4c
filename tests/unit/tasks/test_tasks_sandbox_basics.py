import logging
import time

import pytest

from swarmrl.configs.tasks import CodeRewardConfig
from swarmrl.tasks import sandbox
from swarmrl.tasks.errors import SandboxError
from swarmrl.tasks.sandbox import (
    ISOLATION_GAUGE,
    SandboxLimits,
    SandboxPlan,
    SandboxSession,
    SessionBroken,
    announce_isolation,
    sandbox_plan,
)

LIMITS = SandboxLimits(wall_seconds=10, cpu_seconds=5)


@pytest.fixture(scope="module")
def plan():
    return sandbox_plan(CodeRewardConfig())


def session(plan, code: str, limits: SandboxLimits = LIMITS) -> SandboxSession:
    return SandboxSession(plan, limits, code)


def test_auto_isolation_is_bwrap_here(plan):
    # The suite's machines install bubblewrap (Makefile); a silent downgrade would show up here.
    assert plan.mode == "bwrap" and plan.seccomp


def test_runs_a_program_per_stdin_with_stdout_and_exit_status(plan):
    code = (
        "import sys\ndata = sys.stdin.read().split()\nprint(sum(map(int, data)))\nprint('e', file=sys.stderr)"
    )
    with session(plan, code) as box:
        first, second = box.run("1 2"), box.run("40 2")
        assert (first.exit_status, first.stdout, first.stderr) == (0, "3\n", "e\n")
        assert second.stdout == "42\n" and second.succeeded


def test_exits_crashes_and_fd_level_io_stay_inside_one_run(plan):
    code = (
        "import os, sys\n"
        "mode, _, rest = open(0).read().partition('\\n')\n"
        "if mode == 'exit3': raise SystemExit(3)\n"
        "if mode == 'crash': 1 / 0\n"
        "if mode == 'fd': os.write(1, rest.encode()); os._exit(0)\n"
        "print('normal')\n"
    )
    with session(plan, code) as box:
        assert box.run("exit3\n").exit_status == 3
        crashed = box.run("crash\n")
        assert crashed.exit_status == 1 and "ZeroDivisionError" in crashed.stderr
        assert box.run("fd\nrest of input\n").stdout == "rest of input\n"
        assert box.run("again\n").stdout == "normal\n"  # earlier runs did not take the server down


def test_function_calls_return_plain_values_and_exceptions(plan):
    code = (
        "def pair(a, b=0):\n    return (a, [b, {a: b}], {1.5}, b'x', 2 ** 20000 > 0)\n"
        "def fail(x):\n    raise KeyError(x)\n"
        "CONSTANT = 3\n"
    )
    with session(plan, code) as box:
        assert box.call("pair", (1,), {"b": 2}) == ("returned", (1, [2, {1: 2}], {1.5}, b"x", True))
        assert box.call("fail", ("k",), {}) == ("raised", "KeyError", "'k'")
        with pytest.raises(SessionBroken, match="defines no function"):
            box.call("missing", (), {})


def test_values_that_are_not_plain_data_fail_the_call(plan):
    code = "def gen():\n    return (x for x in range(3))\ndef lam():\n    return lambda: 1\n"
    with session(plan, code) as box:
        for name in ("gen", "lam"):
            with pytest.raises(SessionBroken, match="not plain data"):
                box.call(name, (), {})


def test_the_deadline_covers_the_whole_session(plan):
    limits = SandboxLimits(wall_seconds=1.5, cpu_seconds=5)
    started = time.monotonic()
    with session(plan, "import time\ndef slow():\n    time.sleep(60)\n", limits) as box:
        with pytest.raises(SessionBroken, match="timed out"):
            box.call("slow", (), {})
    assert time.monotonic() - started < 60 / 2  # cut at the session's deadline, not the call's 60 s


def test_cpu_limit_ends_a_busy_run(plan):
    limits = SandboxLimits(wall_seconds=30, cpu_seconds=1)
    with session(plan, "while True:\n    pass", limits) as box:
        outcome = box.run("")
    assert outcome.exit_status < 0  # SIGXCPU, then SIGKILL at the hard limit


def test_numpy_is_allowed_and_converted_to_plain_values(plan):
    code = "import numpy as np\ndef f(n):\n    return np.arange(n) * 2, np.float64(0.5), np.int64(7)\n"
    with session(plan, code) as box:
        assert box.call("f", (3,), {}) == ("returned", ([0, 2, 4], 0.5, 7))


def test_setup_failures_are_sandbox_errors_not_verdicts(plan):
    broken = SandboxPlan(
        mode=plan.mode,
        command=("/nonexistent/python",),
        bwrap_args=plan.bwrap_args,
        private_uid=plan.private_uid,
        seccomp=plan.seccomp,
    )
    with pytest.raises(SandboxError, match="setup failed"):
        with session(broken, "print(1)") as box:
            box.run("")


def test_fail_closed_without_bubblewrap(monkeypatch, caplog):
    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    sandbox._plan.cache_clear()
    try:
        with pytest.raises(SandboxError, match="apt-get install -y bubblewrap"):
            sandbox_plan(CodeRewardConfig())
        with pytest.raises(SandboxError, match="apt-get install -y bubblewrap"):
            sandbox_plan(CodeRewardConfig(isolation="bwrap", unsafe_no_os_isolation=True))
        unsafe = sandbox_plan(CodeRewardConfig(unsafe_no_os_isolation=True))
        assert unsafe.mode == "none"
        with caplog.at_level(logging.WARNING, logger="swarmrl.tasks.sandbox"):
            announce_isolation(unsafe)
        assert "UNSAFE" in caplog.text
        assert ISOLATION_GAUGE.labels(mode="none")._value.get() == 1.0
        assert ISOLATION_GAUGE.labels(mode="bwrap")._value.get() == 0.0
    finally:
        sandbox._plan.cache_clear()


def test_isolation_none_needs_the_explicit_unsafe_flag():
    with pytest.raises(ValueError, match="unsafe_no_os_isolation"):
        CodeRewardConfig(isolation="none")
    with pytest.raises(ValueError, match="import names"):
        CodeRewardConfig(allowed_packages=["numpy; rm -rf /"])


def test_unsafe_mode_still_runs_and_judges(plan):
    unsafe = sandbox_plan(CodeRewardConfig(isolation="none", unsafe_no_os_isolation=True))
    code = 'def f(x):\n    return x * 2\nif __name__ == "__main__":\n    print(input())'
    with session(unsafe, code) as box:
        assert box.call("f", (21,), {}) == ("returned", 42)
        assert box.run("hi\n").stdout == "hi\n"


def test_announce_logs_and_exports_the_mode(plan, caplog):
    with caplog.at_level(logging.INFO, logger="swarmrl.tasks.sandbox"):
        announce_isolation(plan)
    assert "code sandbox isolation: bwrap" in caplog.text
    assert ISOLATION_GAUGE.labels(mode="bwrap")._value.get() == 1.0


def test_a_broken_session_stays_broken(plan):
    # After a timeout, a late reply must never be taken for the answer to the next request.
    limits = SandboxLimits(wall_seconds=1.0, cpu_seconds=5)
    code = (
        "import time\ndef slow():\n    time.sleep(1.5)\n    return 'late'\ndef fast():\n    return 'fast'\n"
    )
    with session(plan, code, limits) as box:
        with pytest.raises(SessionBroken, match="timed out"):
            box.call("slow", (), {})
        box.deadline += 10
        with pytest.raises(SessionBroken, match="timed out"):
            box.call("fast", (), {})


def test_a_reused_cgroup_takes_a_higher_and_then_a_lower_memory_limit() -> None:
    """cgroup v1 refuses a memory limit above memory+swap's: raising one must move memsw first (a verifier's
    1 GiB sandbox after a 512 MiB one got EINVAL before)."""
    from swarmrl.tasks.sandbox_cgroup import SandboxCgroup, cgroup_parents

    parents = cgroup_parents()
    assert parents is not None, "root on this kind of machine has writable cgroups (make sandbox-deps)"
    group = SandboxCgroup(parents)
    try:
        for megabytes in (512, 1024, 256, 2048):
            group.limit(megabytes << 20, max_processes=16)
            assert int(open(f"{group.memory_dir}/{_memory_file(parents.version)}").read()) == megabytes << 20
    finally:
        group.remove()


def _memory_file(version: int) -> str:
    return "memory.limit_in_bytes" if version == 1 else "memory.max"
