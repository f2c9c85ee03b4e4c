"""Log lines for files and pipes: one line per record with logger and pid (plain or JSON), rich only on a TTY."""

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmrl.cli import app
from swarmrl.logs import JsonFormatter, PlainFormatter, configure_logging, resolve_format

SRC = Path(__file__).resolve().parents[3] / "src"
LONG = "w" * 300  # rich would wrap this at 80 columns on a non-terminal


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def record(message="hello %s", args=("world",), exc_info=None, **extra):
    entry = logging.LogRecord("swarmrl.worker.node", logging.WARNING, __file__, 7, message, args, exc_info)
    entry.__dict__.update(extra)
    return entry


def test_auto_is_rich_on_a_terminal_and_plain_elsewhere(monkeypatch):
    monkeypatch.delenv("SWARMRL_LOG_FORMAT", raising=False)
    assert resolve_format("auto", Terminal()) == "rich"
    assert resolve_format("auto", io.StringIO()) == "plain"
    assert resolve_format(None, io.StringIO()) == "plain"
    monkeypatch.setenv("SWARMRL_LOG_FORMAT", "json")
    assert resolve_format(None, Terminal()) == "json"
    assert resolve_format("plain", Terminal()) == "plain"  # an explicit choice beats the environment
    monkeypatch.setenv("SWARMRL_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="'xml' is not one of"):
        resolve_format(None, io.StringIO())


def test_plain_line_carries_time_level_logger_and_pid():
    line = PlainFormatter().format(record())
    stamp, rest = line.split(" ", 1)
    assert rest == f"WARNING swarmrl.worker.node [pid {os.getpid()}] hello world"
    assert stamp.endswith("Z") and "T" in stamp and len(stamp) == len("2026-11-24T16:07:05.123Z")


def test_json_line_is_one_object_with_extras_and_traceback():
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        failing = record(exc_info=sys.exc_info(), step=3, node="ab12")
    line = JsonFormatter().format(failing)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["logger"] == "swarmrl.worker.node" and entry["level"] == "WARNING"
    assert entry["pid"] == os.getpid() and entry["message"] == "hello world"
    assert (entry["step"], entry["node"]) == (3, "ab12")
    assert "RuntimeError: boom" in entry["exception"]


def test_configure_replaces_only_its_own_handler():
    foreign = logging.NullHandler()
    logging.getLogger().addHandler(foreign)
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", stream=first)
    configure_logging("plain", stream=second)
    logging.getLogger("swarmrl.test").info("only once")
    assert first.getvalue() == ""
    assert second.getvalue().count("only once") == 1
    assert foreign in logging.getLogger().handlers


def run_logging_child(**env) -> str:
    """A fresh process that configures logging like the CLI and logs one long line to a pipe."""
    code = (
        "import logging; from swarmrl.logs import configure_logging; configure_logging(None); "
        f"logging.getLogger('swarmrl.trainer').info('step done %s', {LONG!r})"
    )
    inherited = {k: v for k, v in os.environ.items() if k != "SWARMRL_LOG_FORMAT"}
    environment = {**inherited, "PYTHONPATH": str(SRC), **env}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_a_piped_process_writes_unwrapped_plain_lines():
    lines = run_logging_child().splitlines()
    assert len(lines) == 1
    assert " INFO swarmrl.trainer [pid " in lines[0] and lines[0].endswith(f"step done {LONG}")


def test_the_environment_selects_json_for_a_child():
    entry = json.loads(run_logging_child(SWARMRL_LOG_FORMAT="json"))
    assert entry["logger"] == "swarmrl.trainer" and entry["message"] == f"step done {LONG}"


@pytest.mark.parametrize(
    ("args", "env", "formatter"),
    [(["--log-format", "json"], {}, JsonFormatter), ([], {"SWARMRL_LOG_FORMAT": "plain"}, PlainFormatter)],
)
def test_cli_option_and_environment_reach_the_root_logger(args, env, formatter):
    result = CliRunner().invoke(app, [*args, "rl", "--dry-run"], env=env)
    assert result.exit_code == 0, result.output
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_swarmrl", False)]
    assert len(ours) == 1 and isinstance(ours[0].formatter, formatter)


def test_cli_refuses_an_unknown_format():
    result = CliRunner().invoke(app, ["--log-format", "xml", "rl", "--dry-run"])
    assert result.exit_code == 2
    assert "xml" in result.output
