import pytest

from swarmrl.tasks.errors import SandboxError
from swarmrl.tasks.sandbox import SandboxLimits, resolve_isolation, run_python


def test_runs_a_program_with_stdin_and_sibling_files():
    files = {
        "main.py": "import helper, sys\nprint(helper.double(int(sys.stdin.read())))\n"
        "print('e', file=sys.stderr)",
        "helper.py": "def double(x):\n    return 2 * x\n",
    }
    result = run_python(files, stdin="21")
    assert result.succeeded and result.stdout == "42\n" and result.stderr == "e\n"


def test_main_globals_are_predefined():
    result = run_python({"main.py": "print(GIVEN['a'] + 1)"}, main_globals={"GIVEN": {"a": 1}})
    assert result.stdout.strip() == "2"


def test_nonzero_exit_and_exceptions_are_results_not_errors():
    assert run_python({"main.py": "raise SystemExit(3)"}).returncode == 3
    failed = run_python({"main.py": "1/0"})
    assert failed.returncode == 1 and "ZeroDivisionError" in failed.stderr and not failed.succeeded


def test_prelude_mode_works_everywhere():
    result = run_python({"main.py": "import os\nprint(os.getcwd().startswith('/tmp'))"}, isolation="prelude")
    assert result.succeeded


def test_bad_arguments_are_sandbox_errors():
    with pytest.raises(SandboxError):
        run_python({"other.py": "pass"})
    with pytest.raises(SandboxError):
        run_python({"main.py": "pass", "../escape.py": "x"})
    with pytest.raises(SandboxError):
        resolve_isolation("chroot")
    with pytest.raises(SandboxError, match="guard"):
        run_python({"main.py": "pass"}, isolation="prelude", guard=False)


def test_cpu_limit_applies_even_with_a_long_wall_clock():
    result = run_python(
        {"main.py": "while True:\n    pass"}, limits=SandboxLimits(wall_seconds=30, cpu_seconds=1)
    )
    assert not result.timed_out and result.returncode != 0 and result.seconds < 15
