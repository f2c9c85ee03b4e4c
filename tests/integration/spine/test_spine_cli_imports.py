"""The light commands stay light: `swarmrl --help`, `coordinator`, `relay`, `admin` and `status` never import
torch or transformers (3.9 s and 432 MB before), nor does the help of `diloco` and `diloco-replica` (29 s and
36 s on a loaded machine before); role commands load only when they run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from swarmrl.cli import COMMANDS, app

SRC = Path(__file__).resolve().parents[3] / "src"
HEAVY = {"torch", "transformers"}


def imported_modules(*args: str, first: Path | None = None) -> set[str]:
    """Top-level packages a fresh `python -m swarmrl.cli ARGS` imports (from -X importtime); `first`: a
    directory put before everything on the path."""
    path = [str(first)] if first is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(SRC), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "swarmrl.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Usage" in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    assert lines, "no -X importtime output"
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines}


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("coordinator", "--help"),
        ("relay", "--help"),
        ("admin", "--help"),
        ("admin", "ban", "--help"),
        ("status", "--help"),
        ("diloco", "--help"),
        ("diloco-replica", "--help"),
    ],
)
def test_light_commands_import_neither_torch_nor_transformers(args):
    modules = imported_modules(*args)
    assert not HEAVY & modules, f"{' '.join(args)} imported {sorted(HEAVY & modules)}"


@pytest.mark.slow
def test_the_probe_sees_torch_when_a_command_loads_it(tmp_path):
    # The same probe where something imports torch at start (every command's help is light now): proves the
    # check above can fail.
    (tmp_path / "sitecustomize.py").write_text("import torch\n")
    assert "torch" in imported_modules("diloco", "--help", first=tmp_path)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_listed_summary_is_the_commands_own(name):
    command = typer.main.get_command(COMMANDS[name].load())
    own = " ".join((command.help or "").split("\n\n")[0].split())
    assert COMMANDS[name].summary == own


def test_every_role_command_runs_through_the_top_level_app():
    from typer.testing import CliRunner

    for name in COMMANDS:
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage" in result.output and name in result.output


def test_every_command_lives_with_its_room_and_is_listed_once():
    # One convention: a plain typer function (or app) in the cli.py of the room it belongs to, named in
    # COMMANDS; the top-level package holds only the launchers and keygen.
    import ast
    import inspect

    for name, entry in COMMANDS.items():
        module = inspect.getclosurevars(entry.load).nonlocals["module"]  # what the lazy loader imports
        room = module.split(".")[1]
        assert module == f"swarmrl.{room}.cli" or room == "cli" or module == "swarmrl.coordinator.status", (
            name,
            module,
        )
    top = ast.parse((SRC / "swarmrl" / "cli" / "__init__.py").read_text())
    decorated = [n for n in ast.walk(top) if isinstance(n, ast.FunctionDef) and n.decorator_list]
    assert [n.name for n in decorated] == ["main"]  # commands are registered through COMMANDS only


def test_the_cli_and_client_modules_keep_the_house_sizes():
    import ast

    owned = [*(SRC / "swarmrl" / "cli").glob("*.py"), SRC / "swarmrl" / "cli_options.py"]
    owned += [SRC / "swarmrl" / room / "cli.py" for room in ("trainer", "worker", "validator", "islands")]
    owned += [SRC / "swarmrl" / "coordinator" / f for f in ("client.py", "transport.py")]
    owned += [SRC / "swarmrl" / "worker" / "node.py", SRC / "swarmrl" / "launch" / "preflight.py"]
    for path in owned:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno - node.lineno < 80, (path.name, node.name)
    from swarmrl.coordinator import client

    for cls in (
        client.PublicReads,
        client.NodeClient,
        client.ValidatorClient,
        client.TrainerClient,
        client.AdminClient,
    ):
        methods = {
            n
            for klass in cls.__mro__[:-1]
            for n, v in vars(klass).items()
            if callable(v) or isinstance(v, property)
        }
        assert len(methods) <= 25, (cls.__name__, len(methods))  # inherited ones counted too
