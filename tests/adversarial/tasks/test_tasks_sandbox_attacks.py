"""Hostile programs against the sandbox: each is stopped within its limit, scores 0, and the caller lives on.

Every attack runs with the full sandbox; where namespaces are available it also runs with the in-process
audit-hook guard switched off, to show the OS layers (namespaces, private uid, rlimits) hold on their own.
"""

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from swarmrl.tasks.code_verifier import CodeVerifier
from swarmrl.tasks.config import CodeRewardConfig
from swarmrl.tasks.sandbox import SandboxLimits, resolve_isolation, run_python
from swarmrl.tasks.task import Task

LIMITS = SandboxLimits(
    wall_seconds=2.5, cpu_seconds=2, memory_bytes=512 << 20, max_processes=8, max_output_bytes=64 << 10
)
HAS_NAMESPACES = resolve_isolation("auto") == "namespaces"
NEEDS_NAMESPACES = pytest.mark.skipif(
    not HAS_NAMESPACES, reason="namespace isolation unavailable (root + unshare)"
)
# (isolation, audit-hook guard): the full sandbox in both isolation modes, and the OS layers on their own.
MODES = [
    ("prelude", True),
    pytest.param("namespaces", True, marks=NEEDS_NAMESPACES),
    pytest.param("namespaces", False, marks=NEEDS_NAMESPACES),
]
CHECK_TASK = Task(
    "inc",
    "def inc",
    "code",
    {"test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"},
)


def run(source: str, guard: bool, stdin: str = "", isolation: str = "auto"):
    started = time.monotonic()
    result = run_python({"main.py": source}, stdin=stdin, limits=LIMITS, guard=guard, isolation=isolation)
    elapsed = time.monotonic() - started
    assert elapsed < LIMITS.wall_seconds + 3, f"sandbox took {elapsed:.1f}s"
    return result


def leftover_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def scores_zero(attack: str) -> None:
    verifier = CodeVerifier(CodeRewardConfig(timeout_seconds=2.5, cpu_seconds=2, memory_mb=512))
    completion = f"```python\n{attack}\ndef inc(x):\n    return x + 1\n```"
    assert verifier.score(CHECK_TASK, completion) == 0.0


@pytest.mark.parametrize(("isolation", "guard"), MODES)
def test_infinite_loop_is_stopped(isolation, guard):
    result = run("while True:\n    pass", guard, isolation=isolation)
    # whichever limit bites first: the wall clock (timed_out) or RLIMIT_CPU (killed by SIGXCPU/SIGKILL)
    assert not result.succeeded and (result.timed_out or result.returncode < 0)


@pytest.mark.parametrize(("isolation", "guard"), MODES)
def test_fork_bomb_is_contained(isolation, guard):
    marker = f"forkbomb{uuid.uuid4().hex}"
    result = run(f"import os\nmarker = '{marker}'\nwhile True:\n    os.fork()", guard, isolation=isolation)
    assert not result.succeeded
    assert leftover_processes(marker) == []


@pytest.mark.parametrize(("isolation", "guard"), MODES)
def test_memory_bomb_fails_fast(isolation, guard):
    result = run(
        "chunks = []\nwhile True:\n    chunks.append(bytearray(50 << 20))", guard, isolation=isolation
    )
    assert not result.succeeded and not result.timed_out
    assert "MemoryError" in result.stderr


@pytest.mark.parametrize(("isolation", "guard"), MODES)
def test_writes_outside_the_work_dir_never_reach_the_host(isolation, guard, tmp_path):
    targets = [
        tmp_path / "escaped.txt",
        Path(f"/var/tmp/escaped-{uuid.uuid4().hex}"),
        Path(f"/work/escaped-{uuid.uuid4().hex}"),
    ]
    program = (
        "import os\n"
        + "".join(
            f"try:\n    open({str(t)!r}, 'w').write('x')\nexcept OSError as e:\n    print('blocked', e)\n"
            for t in targets
        )
        + "open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())"
    )
    result = run(program, guard, isolation=isolation)
    assert result.succeeded and result.stdout.strip().endswith("ok")
    for target in targets:
        assert not target.exists(), f"{target} was written"


@pytest.mark.parametrize(("isolation", "guard"), MODES)
def test_no_network_even_to_localhost(isolation, guard):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        result = run(
            f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "s.sendall(b'leak')\nprint('connected')",
            guard,
            isolation=isolation,
        )
        with pytest.raises(socket.timeout):
            server.accept()
    assert "connected" not in result.stdout and not result.succeeded


@pytest.mark.parametrize(("isolation", "guard"), MODES)
def test_shell_commands_cannot_touch_the_host(isolation, guard):
    target = Path(f"/var/tmp/system-{uuid.uuid4().hex}")
    result = run(f"import os\nos.system('touch {target}; echo ran')", guard, isolation=isolation)
    assert not target.exists()
    if guard:
        assert not result.succeeded and "os.system" in result.stderr


@pytest.mark.parametrize(("isolation", "guard"), MODES)
def test_background_children_do_not_outlive_the_run(isolation, guard):
    marker = f"{uuid.uuid4().int % 10**6}.123"
    run(
        f"import subprocess, os\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        f"os.system('nohup sleep {marker} &')",
        guard,
        isolation=isolation,
    )
    time.sleep(0.2)
    assert leftover_processes(f"sleep\x00{marker}") == []


@pytest.mark.parametrize(("isolation", "guard"), MODES)
def test_caller_cannot_be_signalled(isolation, guard):
    result = run(
        "import os, signal\nfor pid in (os.getppid(), 1, -1, 0):\n    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n    except Exception as e:\n        print(type(e).__name__)\n"
        "print('done')",
        guard,
        isolation=isolation,
    )
    assert os.getpid() > 0  # still here
    assert result.returncode is not None


def test_output_flood_is_capped():
    result = run("while True:\n    print('x' * 10000)", True)
    assert result.output_limited and len(result.stdout) <= LIMITS.max_output_bytes


def test_large_stdin_is_delivered():
    data = "7\n" * 500_000
    result = run("import sys\nprint(sum(int(x) for x in sys.stdin))", True, stdin=data)
    assert result.succeeded and result.stdout.strip() == str(7 * 500_000)


@pytest.mark.parametrize(
    "attack",
    [
        "while True:\n    pass",
        "import os\nwhile True:\n    os.fork()",
        "x = bytearray(8 << 30)",
        "open('/var/tmp/pwned', 'w').write('x')",
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)",
        "import os\nos.system('echo hi')",
        "import subprocess\nsubprocess.run(['true'])",
        "import ctypes\nctypes.CDLL(None).system(b'echo hi')",
    ],
)
def test_each_attack_scores_zero(attack):
    scores_zero(attack)


ISOLATIONS = [
    "prelude",
    pytest.param(
        "namespaces",
        marks=pytest.mark.skipif(not HAS_NAMESPACES, reason="namespace isolation unavailable here"),
    ),
]


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_other_processes_cannot_be_signalled_or_reniced(isolation):
    import subprocess

    victim = subprocess.Popen(["sleep", "60"])
    try:
        program = (
            "import os, signal\n"
            f"pid = {victim.pid}\n"
            "attempts = [\n"
            "    lambda: signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL),\n"
            "    lambda: os.kill(pid, signal.SIGKILL),\n"
            "    lambda: os.sched_setaffinity(pid, {0}),\n"
            "    lambda: os.setpriority(os.PRIO_PROCESS, pid, 19),\n"
            "    lambda: __import__('resource').prlimit(pid, __import__('resource').RLIMIT_NOFILE, (1, 1)),\n"
            "]\n"
            "for attempt in attempts:\n"
            "    try:\n"
            "        attempt()\n"
            "        print('succeeded')\n"
            "    except BaseException as e:\n"
            "        print('refused', type(e).__name__)\n"
        )
        result = run_python({"main.py": program}, limits=LIMITS, isolation=isolation)
        assert result.returncode == 0, result.stderr
        assert "succeeded" not in result.stdout
        assert victim.poll() is None
        assert os.getpriority(os.PRIO_PROCESS, victim.pid) == 0
    finally:
        victim.kill()
        victim.wait()
