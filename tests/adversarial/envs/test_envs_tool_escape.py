"""Model-written tool code that tries to leave the sandbox: each attempt is contained, and the episode goes
on with the failure as the tool's output (the model sees it; the host is untouched)."""

import os

import pytest

from swarmrl.configs.tasks import CodeRewardConfig
from swarmrl.envs.python_tool import PythonToolEnv
from swarmrl.tasks.arithmetic import ArithmeticSource
from swarmrl.tasks.math_verifier import MathVerifier
from swarmrl.tasks.sandbox import SandboxLimits, sandbox_plan

LIMITS = SandboxLimits(wall_seconds=3, cpu_seconds=2, max_processes=16)


@pytest.fixture(scope="module")
def env():
    verifier = MathVerifier()
    tool = PythonToolEnv(verifier, sandbox_plan(CodeRewardConfig()), LIMITS, max_tool_calls=100)
    tool.reset(ArithmeticSource(seed=1, size=1)[0], 0)
    yield tool
    verifier.close()


def run(env, code):
    step = env.step(f"```python\n{code}\n```")
    assert not step.done and step.message.startswith("<output>\n") and step.message.endswith("</output>")
    return step.message


def test_no_network(env):
    out = run(env, "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\nprint('CONNECTED')")
    assert "CONNECTED" not in out and "exit status" in out
    assert "PermissionError: sandbox: socket" in out  # refused by name, before any packet


def test_host_secrets_and_files_are_out_of_reach(env):
    shadow = run(env, "print(open('/etc/shadow').read())")
    assert "exit status" in shadow and "No such file or directory" in shadow  # not even mounted
    # Only the read-only interpreter is mounted: the checkout and the test's own files are not there.
    here = os.path.abspath(__file__)
    out = run(env, f"import os\nprint('SEEN' if os.path.exists({here!r}) else 'ABSENT')")
    assert "ABSENT" in out
    out = run(env, "import os\nprint(sorted(os.environ))")
    assert "SWARMRL" not in out and "AWS" not in out


def test_writes_stay_inside_the_sandbox(env, tmp_path):
    target = tmp_path / "escaped"
    out = run(env, f"open({str(target)!r}, 'w').write('x')")
    assert not target.exists() and "outside the work dir is not allowed" in out


def test_hang_and_fork_bomb_are_cut(env):
    hang = run(env, "while True: pass")
    # Cut by whichever limit comes first on this machine: the wall-clock timeout or the CPU-time rlimit.
    assert "error: timed out" in hang or "killed by SIGXCPU" in hang, hang
    bomb = run(env, "import os\nwhile True:\n    os.fork()")
    # The sandbox strips os.fork from the solution's interpreter (STRIPPED_ATTRIBUTES): the bomb ends at once.
    assert bomb.endswith("(exit status 1)\nAttributeError: module 'os' has no attribute 'fork'\n</output>"), (
        bomb
    )


def test_oversized_output_is_cut_to_the_limit(env):
    out = run(env, "print('x' * 10**6)")
    assert len(out) <= env.max_output_chars + 64


@pytest.mark.parametrize(
    ("code", "refusal"),
    [
        ("import subprocess\nprint(subprocess.run(['id'], capture_output=True))", "ImportError: sandbox:"),
        ("import ctypes\nprint(ctypes.CDLL(None))", "ImportError: sandbox: importing ctypes"),
    ],
)
def test_process_creation_and_native_calls_are_refused_by_name(env, code, refusal):
    assert refusal in run(env, code)
