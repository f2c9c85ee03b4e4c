"""`--dry-run`: check, before anything starts, what a run will need — in seconds, with no torch.

The model directory and its tokenizer, each task source (file, columns, first rows, prompt format), the reward
function of every task type or each reward function of yours tried on those rows, the fixed ports, the metrics packages, and a run root that can be written with room for the run's
checkpoints. Every check runs and the report lists them all, so one dry run shows every mistake at once.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from swarmrl.configs import ConfigError, RunConfig
from swarmrl.errors import UserError
from swarmrl.launch.preflight_tasks import check_source, reward_function_trials
from swarmrl.tasks.task import Task

# What a run root must have free beyond its checkpoints: config, logs, rollout files, metrics.
BASE_FREE_BYTES = 64 * 2**20
# Packages a task type's reward function needs (code runs in the bubblewrap sandbox, see [tasks.code]).
REWARD_PACKAGES = {"math": "math_verify", "reasoning_gym": "reasoning_gym"}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, ok, detail))

    def render(self, failed_only: bool = False) -> str:
        failed = sum(not check.ok for check in self.checks)
        shown = [check for check in self.checks if not (failed_only and check.ok)]
        lines = [f"{'ok  ' if check.ok else 'FAIL'}  {check.name}: {check.detail}" for check in shown]
        verdict = "preflight: every check passed" if not failed else f"preflight: {failed} check(s) failed"
        return "\n".join([*lines, verdict])


def preflight(config: RunConfig) -> Report:
    report = Report()
    _model(config, report)
    task_types, tasks = _task_sources(config, report)
    if config.tasks.reward_functions:  # they score every task, whatever its type
        for name, ok, detail in reward_function_trials(config, tasks):
            report.add(name, ok, detail)
    else:
        _rewards(config, task_types, report)
    _ports(config, report)
    try:
        config.metrics.check_installed()
        report.add("metrics", True, "the sinks [metrics] asks for are installed")
    except ConfigError as exc:
        report.add("metrics", False, str(exc))
    _run_root(config, report)
    return report


def _model(config: RunConfig, report: Report) -> None:
    path = config.model.path
    if path is None:
        tiny = config.model.tiny
        report.add(
            "model",
            True,
            f"a tiny {tiny.arch} ({tiny.num_layers} layers, hidden {tiny.hidden_size}) built from [model.tiny], "
            f"with a tokenizer trained on the task text",
        )
        return
    try:
        report.add("model", True, describe_model_dir(path))
    except UserError as exc:
        report.add("model", False, str(exc))
        return
    try:
        report.add("tokenizer", True, describe_tokenizer(path))
    except UserError as exc:
        report.add("tokenizer", False, str(exc))


def describe_model_dir(path: Path) -> str:
    """What the model directory holds, or UserError naming what it lacks."""
    if not path.is_dir():
        raise UserError(f"{path}: no such model directory ([model] path)")
    try:
        settings = json.loads((path / "config.json").read_text())
    except OSError as exc:
        raise UserError(
            f"{path}: no readable config.json, not an HF model directory ({exc.strerror})"
        ) from exc
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}/config.json: not valid JSON ({exc})") from exc
    weights = sorted({*path.glob("*.safetensors"), *path.glob("pytorch_model*.bin")})
    if not weights:
        raise UserError(f"{path}: no weights (*.safetensors or pytorch_model*.bin)")
    size = sum(w.stat().st_size for w in weights)
    kind = settings.get("model_type", "?") if isinstance(settings, dict) else "?"
    return f"{path}: {kind}, {len(weights)} weight file(s), {size / 2**20:.1f} MiB"


def describe_tokenizer(path: Path) -> str:
    """The tokenizer files of a model directory, loaded with `tokenizers` when it is installed."""
    fast = path / "tokenizer.json"
    if fast.is_file():
        if find_spec("tokenizers") is None:
            return f"{fast} (not loaded: the tokenizers package is not installed here)"
        from tokenizers import Tokenizer

        try:
            vocab = Tokenizer.from_file(str(fast)).get_vocab_size()
        except Exception as exc:  # noqa: BLE001 — tokenizers raises a bare Exception for a broken file
            raise UserError(f"{fast}: cannot be loaded ({exc})") from exc
        return f"{fast}: {vocab} tokens"
    slow = [name for name in ("tokenizer.model", "vocab.json", "vocab.txt") if (path / name).is_file()]
    if not slow:
        raise UserError(f"{path}: no tokenizer (tokenizer.json, tokenizer.model, vocab.json or vocab.txt)")
    return f"{path}: {', '.join(slow)}"


def _task_sources(config: RunConfig, report: Report) -> tuple[set[str], list[Task]]:
    """Check every source; returns the task types their first rows (or their kind) have, and those rows."""
    types: set[str] = set()
    tasks: list[Task] = []
    for source in config.tasks.sources:
        name = source.name or getattr(source, "generator", source.type)
        checked = check_source(config, source)
        report.add(f"tasks {name}", checked.ok, checked.detail)
        types |= checked.task_types
        tasks += checked.tasks
    return types, tasks


def _rewards(config: RunConfig, task_types: set[str], report: Report) -> None:
    from swarmrl.tasks.reward import verifier_types

    known = verifier_types()
    for task_type in sorted(task_types):
        if task_type not in known:
            report.add(
                f"reward {task_type}",
                False,
                f"no reward function for task_type {task_type!r} (known: {', '.join(sorted(known))})",
            )
        elif task_type == "code":
            ok = shutil.which("bwrap") is not None or config.tasks.code.unsafe_no_os_isolation
            report.add(
                "reward code",
                ok,
                "bubblewrap sandbox" if ok else "bwrap (bubblewrap) is not installed: code cannot be judged",
            )
        else:
            package = REWARD_PACKAGES.get(task_type)
            ok = package is None or find_spec(package) is not None
            installed = "installed" if ok else "not installed: pip install 'swarmrl[tasks]'"
            report.add(
                f"reward {task_type}", ok, f"needs {package}, {installed}" if package else "registered"
            )


def _ports(config: RunConfig, report: Report) -> None:
    configured = [
        ("metrics", config.metrics.prometheus_host, config.metrics.prometheus_port),
        ("shardcast origin", config.shardcast.origin_host, config.shardcast.origin_port),
    ]
    fixed = [(what, host, port) for what, host, port in configured if port]
    if not fixed:
        report.add("ports", True, "none fixed (the OS picks free ones)")
    for what, host, port in fixed:
        problem = port_problem(host, port)
        report.add(f"port {what}", problem is None, problem or f"{host}:{port} is free")


def port_problem(host: str, port: int) -> str | None:
    """Why nothing could listen on host:port now (in use, not an address of this machine), or None."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return f"{host}:{port}: {exc.strerror}"
    return None


def _run_root(config: RunConfig, report: Report) -> None:
    directory = config.run.directory
    existing = next(p for p in (directory, *directory.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        report.add(
            "run root", False, f"{existing} is not writable: set [run] root to a directory you can write"
        )
        return
    needed = BASE_FREE_BYTES + (config.trainer.keep_checkpoints + 2) * checkpoint_bytes(config)
    free = shutil.disk_usage(existing).free
    if free < needed:
        report.add(
            "run root",
            False,
            f"{existing} has {free / 2**20:.1f} MiB free; this run needs about {needed / 2**20:.0f} MiB "
            f"(checkpoints of ~{checkpoint_bytes(config) / 2**20:.1f} MiB each)",
        )
        return
    report.add("run root", True, f"{directory} writable, {free / 2**30:.1f} GiB free")


def checkpoint_bytes(config: RunConfig) -> int:
    """Bytes of one checkpoint: the model directory's weights, or the tiny model's parameters."""
    if config.model.path is not None:
        weights = [*config.model.path.glob("*.safetensors"), *config.model.path.glob("pytorch_model*.bin")]
        return sum(w.stat().st_size for w in weights)
    tiny = config.model.tiny
    width = 4 if config.model.dtype == "float32" else 2
    vocab = tiny.vocab_size or config.model.tokenizer_vocab_size
    mlp = tiny.intermediate_size or 4 * tiny.hidden_size
    embeddings = vocab * tiny.hidden_size * (1 if tiny.tie_word_embeddings else 2)
    return width * (embeddings + tiny.num_layers * (4 * tiny.hidden_size**2 + 3 * tiny.hidden_size * mlp))
