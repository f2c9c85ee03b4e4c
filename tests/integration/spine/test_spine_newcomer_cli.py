"""A newcomer's first hour at the command line (issue 30): a key to give the coordinator, help text that keeps
its brackets, a `--dry-run` preflight that finds every mistake at once, and one line with exit code 2 for each
failure a person can fix — run through `python -m swarmrl.cli` as a person runs it, never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from swarmrl.identity import Identity

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "configs" / "demo.toml"
ROW = {"prompt": "What is 2 + 3?", "verification_info": '{"ground_truth": "5"}', "task_type": "math"}


def swarmrl(*args: str, cwd: Path | None = None, timeout: float = 120, env: dict | None = None):
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        **(env or {}),
    }
    for inherited in (
        "SWARMRL_LOG_FORMAT",
        "SWARMRL_VERBOSE",
        "SWARMRL_LOG_TRACEBACKS",
        "SWARMRL_FAILURE_FD",
    ):
        if inherited not in (env or {}):
            environment.pop(inherited, None)
    return subprocess.run(
        [sys.executable, "-m", "swarmrl.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=timeout,
    )


def one_line_failure(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The result of an expected failure: exit code 2, no traceback, one `error:` line naming the problem."""
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith(("error:", "FAIL"))]
    assert lines, result.stderr[-2000:]
    for needle in needles:
        assert any(needle in line for line in lines), (needle, lines)
    return "\n".join(lines)


def write_jsonl(path: Path, rows: list, raw: str = "") -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + raw)
    return path


def dataset_override(path: Path) -> str:
    return f"tasks.sources=[{{type='dataset', name='mine', path='{path}'}}]"


@pytest.fixture
def held_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


# --- keys --------------------------------------------------------------------------------------------------
def test_keygen_writes_a_key_prints_its_public_key_and_never_overwrites(tmp_path):
    made = swarmrl("keygen", "--out", str(tmp_path / "trainer.pem"))
    assert made.returncode == 0, made.stderr
    public = made.stdout.strip()
    assert public == Identity.load(tmp_path / "trainer.pem").node_id and len(public) == 64
    assert public in made.stderr  # stdout captured (HEX=$(...)): the person still sees the key
    again = swarmrl("keygen", "--out", str(tmp_path / "trainer.pem"))
    assert "never overwrites" in one_line_failure(again)
    assert Identity.load(tmp_path / "trainer.pem").node_id == public
    assert swarmrl("keygen", "--show", "--out", str(tmp_path / "trainer.pem")).stdout.strip() == public


# --- help ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "bracketed"),
    [("trainer", "[shardcast] origin_host"), ("diloco", "[throttle]"), ("island-trainer", "[shardcast]")],
)
def test_help_prints_brackets_as_written(command, bracketed):
    result = swarmrl(command, "--help", env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert bracketed in result.stdout


# --- the preflight -------------------------------------------------------------------------------------------
def test_dry_run_passes_a_good_config_and_says_what_it_checked(tmp_path):
    data = write_jsonl(tmp_path / "tasks.jsonl", [ROW, ROW])
    result = swarmrl("rl", str(DEMO), f"run.root='{tmp_path}'", dataset_override(data), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["run"]["root"] == str(tmp_path)
    assert "every check passed" in result.stderr
    assert "columns prompt, task_type, verification_info" in result.stderr


def test_dry_run_reports_every_mistake_at_once(tmp_path, held_port):
    data = write_jsonl(tmp_path / "tasks.jsonl", [{"question": "2 + 3", "answer": "5"}])
    result = swarmrl(
        "rl",
        str(DEMO),
        f"run.root='{tmp_path}'",
        f"model.path='{tmp_path / 'no-model'}'",
        dataset_override(data),
        f"metrics.prometheus_port={held_port}",
        "metrics.wandb_project='mine'",
        "--dry-run",
    )
    report = one_line_failure(result)
    assert f"FAIL  model: {tmp_path / 'no-model'}: no such model directory" in report
    assert "no 'prompt', 'verification_info', 'task_type' column (the row has 'question', 'answer')" in report
    assert f"FAIL  port metrics: 127.0.0.1:{held_port}" in report
    assert "wandb" in report  # unless the machine has wandb installed: then the check passes and says so
    failed = 3 if importlib.util.find_spec("wandb") else 4
    assert f"preflight: {failed} check(s) failed" in result.stderr


@pytest.mark.slow
def test_dry_run_reads_a_model_directory_and_its_tokenizer(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    result = swarmrl("rl", str(DEMO), f"run.root='{tmp_path}'", f"model.path='{model}'", "--dry-run")
    assert "no weights" in one_line_failure(result)
    (model / "model.safetensors").write_bytes(b"\0" * 8)
    (model / "tokenizer.json").write_text("{not a tokenizer")
    assert "tokenizer.json: cannot be loaded" in one_line_failure(
        swarmrl("rl", str(DEMO), f"run.root='{tmp_path}'", f"model.path='{model}'", "--dry-run")
    )


# --- one line, exit code 2 ----------------------------------------------------------------------------------
def test_a_reward_function_that_cannot_score_the_data_stops_rl_before_it_starts(tmp_path):
    (tmp_path / "mine.py").write_text(
        "def right(completions, answer, **kwargs):\n    return [1.0] * len(completions)\n"
    )
    data = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "2+2?", "solution": "4"}])
    prompts = f"tasks.sources=[{{type='prompts', name='p', path='{data}'}}]"
    result = swarmrl(
        "rl", str(DEMO), f"run.root='{tmp_path}'", prompts, "tasks.reward_functions=['mine:right']",
        env={"PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(tmp_path)])},
    )  # fmt: skip
    one_line_failure(result, "FAIL  reward function mine:right: its parameter 'answer' is never passed")
    assert not (tmp_path / "demo").exists()
    broken = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": [{"role": "assistant", "content": "hi"}]}])
    prompts = f"tasks.sources=[{{type='prompts', name='p', path='{broken}'}}]"
    result = swarmrl("sft", str(DEMO), f"run.root='{tmp_path}'", prompts, "tasks.reward_functions=['mine:right']",
                     env={"PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(tmp_path)])})  # fmt: skip
    one_line_failure(result, "row 0: a chat prompt must end on a user turn, not 'assistant'")


def test_a_missing_model_directory_is_one_line_before_anything_starts(tmp_path):
    result = swarmrl("rl", str(DEMO), f"run.root='{tmp_path}'", f"model.path='{tmp_path / 'nope'}'")
    one_line_failure(result, f"{tmp_path / 'nope'}: no such model directory")
    assert not (tmp_path / "demo").exists()  # refused before the run directory was made


@pytest.mark.parametrize(
    ("rows", "raw", "needle"),
    [
        ([{"question": "2 + 3"}], "", "row 0: no 'prompt', 'verification_info', 'task_type' column"),
        ([ROW], '{"prompt": "unterminated\n', "line 2: not valid JSON"),
        ([{**ROW, "task_type": "chess"}], "", "no reward function for task_type 'chess'"),
    ],
)
def test_a_broken_dataset_is_one_line_naming_file_and_row(tmp_path, rows, raw, needle):
    data = write_jsonl(tmp_path / "tasks.jsonl", rows, raw)
    one_line_failure(swarmrl("rl", str(DEMO), f"run.root='{tmp_path}'", dataset_override(data)), needle)


def test_a_metrics_sink_that_is_not_installed_is_one_line(tmp_path):
    code = (
        "import sys; sys.modules['wandb'] = None; from swarmrl.cli import app; "
        f"app(['rl', {str(DEMO)!r}, \"run.root='{tmp_path}'\", \"metrics.wandb_project='mine'\"])"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    one_line_failure(result, "[metrics] asks for wandb, which is not installed")


@pytest.mark.parametrize("role", ["coordinator", "relay"])
def test_a_port_in_use_is_one_line_naming_host_and_port(tmp_path, held_port, role):
    args = {
        "coordinator": ["--db-url", f"sqlite:///{tmp_path / 'c.db'}", "--storage-dir", str(tmp_path / "s")],
        "relay": [
            "--upstream",
            "http://127.0.0.1:9",
            "--trainer-public-key",
            "ab" * 32,
            "--data-dir",
            str(tmp_path),
        ],
    }[role]
    result = swarmrl(role, "--port", str(held_port), *args)
    one_line_failure(result, f"{role} cannot listen on 127.0.0.1:{held_port}: the address is already in use")
    assert "Unclosed" not in result.stderr  # the relay's client session is closed on the way out


@pytest.mark.slow
def test_a_coordinator_that_is_down_is_one_line_naming_it(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    config = tmp_path / "run.toml"
    config.write_text(DEMO.read_text() + "\n[swarm]\ncoordinator_retry_s = 1.0\n")
    url = f"http://127.0.0.1:{closed}"
    result = swarmrl(
        "worker", "--coordinator", url, "--config", str(config), "--key", str(tmp_path / "k.pem"),
        "--relay", url, "--work-dir", str(tmp_path / "node"),
    )  # fmt: skip
    one_line_failure(result, f"cannot reach the coordinator at {url}")
    assert result.stderr.count("WARNING") <= 1  # the retries said so once


def test_verbose_shows_the_traceback_too(tmp_path):
    quiet = swarmrl("trainer", "--run-dir", str(tmp_path / "nowhere"))
    one_line_failure(quiet, "is not a prepared run directory")
    loud = swarmrl("-v", "trainer", "--run-dir", str(tmp_path / "nowhere"))
    assert loud.returncode == 2 and "Traceback" in loud.stderr and "FileNotFoundError" in loud.stderr


# --- launchers and their role processes ----------------------------------------------------------------------
def test_a_failed_role_process_is_reported_even_when_its_log_cannot_be_written(tmp_path):
    from swarmrl.launch.processes import LaunchError, ProcessGroup

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "trainer.log").symlink_to("/dev/full")  # every write to the log fails with ENOSPC
    group = ProcessGroup(logs)
    try:
        trainer = group.start("trainer", ["trainer", "--run-dir", str(tmp_path / "nowhere")])
        with pytest.raises(LaunchError) as failed:
            group.wait(trainer, interval=0.05)
    finally:
        group.stop()
    message = str(failed.value)
    assert failed.value.exit_code == 2  # the launcher ends with the role's one line and code 2
    assert "trainer exited with code 2: config error:" in message
    assert "is not a prepared run directory" in message and "could not be written" in message


def test_the_log_format_reaches_the_role_processes_a_command_starts(tmp_path):
    script = (
        "import os, sys\n"
        "from swarmrl.cli import app\n"
        "try:\n"
        f"    app(['--log-format', 'json', 'keygen', '--out', {str(tmp_path / 'k.pem')!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "from swarmrl.launch.processes import ProcessGroup\n"
        f"group = ProcessGroup(__import__('pathlib').Path({str(tmp_path / 'logs')!r}))\n"
        f"child = group.start('trainer', ['trainer', '--run-dir', {str(tmp_path / 'nowhere')!r}])\n"
        "child.popen.wait(timeout=120)\n"
        "group.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMRL_")}
    env["PYTHONPATH"] = str(REPO / "src")
    subprocess.run([sys.executable, "-c", script], env=env, timeout=180, check=True, capture_output=True)
    lines = (tmp_path / "logs" / "trainer.log").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line of the child's log is a JSON record
    (failure,) = [r for r in records if r["level"] == "ERROR"]
    assert "is not a prepared run directory" in failure["message"] and "Traceback" in failure["exception"]


# --- addresses peers cannot open --------------------------------------------------------------------------
def test_an_advertised_url_that_resolves_to_loopback_is_warned_about():
    from swarmrl.httpserve.reach import loopback_warning

    assert "cannot reach it" in loopback_warning("http://localhost:8900", "0.0.0.0")
    assert "127.0.0.1 (loopback)" in loopback_warning("http://127.0.0.1:8900", "10.213.0.2")
    assert loopback_warning("http://10.213.0.2:8900", "0.0.0.0") is None
    assert loopback_warning("http://localhost:8900", "127.0.0.1") is None  # a local server, on purpose


def test_a_relay_bound_for_other_machines_warns_when_it_advertises_loopback(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "swarmrl.cli", "relay", "--upstream", "http://127.0.0.1:9", "--trainer-public-key",
         "ab" * 32, "--host", "0.0.0.0", "--port", "0", "--advertise", "http://localhost:8900",
         "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    try:
        warning = process.stderr.readline()
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert warning.startswith("warning: http://localhost:8900 is advertised") and "loopback" in warning


# --- status off a terminal ----------------------------------------------------------------------------------
def test_status_into_a_pipe_keeps_every_column_of_the_nodes_table(tmp_path):
    from swarmrl_lab.coordinator_double import ClockedCoordinator

    world = ClockedCoordinator(tmp_path / "coordinator")
    try:
        world.node().heartbeat("r", 0)
        result = swarmrl("status", "--coordinator", world.url, env={"COLUMNS": ""})
        as_json = swarmrl("status", "--coordinator", world.url, "--json")
    finally:
        world.close()
    assert result.returncode == 0, result.stderr
    (header,) = [line for line in result.stdout.splitlines() if "policy step" in line]
    assert "node" in header and "credit tokens" in header and "rejected by" in header  # one row, not cut
    assert len(header) > 80
    assert json.loads(as_json.stdout)["run"]["run_id"] == "r"


def test_overrides_alone_apply_to_the_default_config(tmp_path):
    # README: `swarmrl demo trainer.steps=20 ...`: no config path, the first argument is an override.
    result = swarmrl("demo", "trainer.steps=4", f"run.root='{tmp_path}'", "--dry-run", cwd=REPO)
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout)
    assert (resolved["run"]["name"], resolved["trainer"]["steps"]) == ("demo", 4)
