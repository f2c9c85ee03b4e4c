"""The `swarmrl` command: one subcommand per role, plus the local launchers (demo, rl, sft, filter).

Every command is a plain typer function (or a typer app, for a group) in the module of the room it belongs to:
a role's commands live with the role (`swarmrl/<role>/cli.py`), the local launchers in `cli/launchers.py`.
`COMMANDS` below lists them all, each with the line `swarmrl --help` shows; a command's module is imported only
when it runs or its own help is asked for, so `swarmrl --help` and the light roles never pay for torch.
Adding a command is one entry in `COMMANDS`.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from swarmrl.cli.extras import explain_missing
from swarmrl.cli.failures import fail, take_failure_pipe
from swarmrl.logs import LOG_FORMAT_ENV, LogFormat, configure_logging

VERBOSE_ENV = "SWARMRL_VERBOSE"

# Once torch and transformers are imported a role's process holds some 400,000 objects, and the interpreter's
# last collection at exit walks them all (1 to 2 s of CPU per process) to free memory the OS takes back anyway.
# Objects alive at exit are frozen out of it; files and logs are closed and flushed by their own exit handlers.
atexit.register(gc.freeze)


def collect_garbage_less_often() -> None:
    """A young generation of 20,000 objects instead of 700. A role's start is mostly imports, some 450,000
    objects that live as long as the process, and with the default the collector's full passes walk the growing
    heap again and again: 7 of them while the trainer's role imported, 1.2 s of its 5.6 s of CPU (2026-12-07);
    with 20,000, none, and 4.2 s. Cyclic garbage waits for at most 20,000 allocations before it is freed."""
    gc.set_threshold(20_000, 10, 10)


collect_garbage_less_often()


@dataclass(frozen=True)
class Command:
    """A command: the line `swarmrl --help` lists (a test keeps it equal to the command's own), and how to load it."""

    summary: str
    load: Callable[[], typer.Typer]


def one(module: str, function: str) -> Callable[[], typer.Typer]:
    """A command that is one function of `module`."""

    def load() -> typer.Typer:
        single = typer.Typer(add_completion=False)
        single.command()(getattr(importlib.import_module(module), function))
        return single

    return load


def group(module: str, help: str, commands: dict[str, str]) -> Callable[[], typer.Typer]:
    """A group of commands, each a function of `module`: {command name: function name}, or "module:function"
    for one that lives on another floor (a command that talks to the coordinator, in a group of offline ones)."""

    def load() -> typer.Typer:
        group = typer.Typer(help=help, no_args_is_help=True, add_completion=False)
        for name, function in commands.items():
            where, _, attribute = function.rpartition(":")
            group.command(name)(getattr(importlib.import_module(where or module), attribute))
        return group

    return load


def app_of(module: str, attribute: str) -> Callable[[], typer.Typer]:
    """A group that `module` builds itself as a typer app (with its own callback)."""
    return lambda: getattr(importlib.import_module(module), attribute)


LAUNCHERS = "swarmrl.cli.launchers"
# Each pulls in what its role needs (sqlalchemy, aiohttp, torch ...); `swarmrl --help` and the light roles
# (coordinator, relay, admin) must not pay for the others.
COMMANDS = {
    # --- on this machine: a whole run from one config -------------------------------------------------------
    "demo": Command(
        "SFT a tiny model, then asynchronous RL: with local workers (held-out accuracy before and after), or "
        "with --swarm as a swarm of processes on 127.0.0.1 (live table; the cheater is rejected and banned), or "
        "with --islands as several trainer islands merged every H steps (islands_result.json), or with --wan as "
        "the swarm spread over emulated regions and measured against loopback (wan_result.json; needs root), or "
        "with --islands --wan as the islands in emulated regions, merging across the links (islands_wan_result.json).",
        one(LAUNCHERS, "demo"),
    ),
    "rl": Command(
        "Asynchronous RL on this machine: a trainer and N workers sharing a run directory (resumes if present).",
        one(LAUNCHERS, "rl"),
    ),
    "sft": Command(
        "Warm-start a policy by supervised training on task demonstrations; writes checkpoints/step_0.",
        one(LAUNCHERS, "sft"),
    ),
    "filter": Command(
        "Offline difficulty filter: write each task's solve rate under a policy (keep a band with "
        "tasks.solve_rate_band).",
        one(LAUNCHERS, "filter_tasks"),
    ),
    "keygen": Command(
        "Make an Ed25519 node key (PEM) for a trainer, validator or worker; prints its hex public key.",
        one("swarmrl.cli.keygen", "keygen"),
    ),
    # --- roles: each a process of a run, local or across machines -------------------------------------------
    "trainer": Command(
        "The trusted trainer: of a local run, or with --coordinator of a swarm (it then serves a shardcast origin).",
        one("swarmrl.trainer.cli", "trainer"),
    ),
    "island-trainer": Command(
        "One trainer island: the trainer of a local run or, with --coordinator, of the island's own swarm "
        "(merged policies then go out through its shardcast origin), merged with the other islands every H steps.",
        one("swarmrl.islands.cli", "island_trainer"),
    ),
    "worker": Command(
        "An inference worker: of a local run (--run-dir), or a permissionless node of a swarm (--coordinator). "
        "--device overrides the config's worker.device.",
        one("swarmrl.worker.cli", "worker"),
    ),
    "validator": Command(
        "The validator: judge rollout files; `calibrate` its thresholds.",
        app_of("swarmrl.validator.cli", "validator"),
    ),
    "coordinator": Command(
        "Run the coordinator: identities, heartbeats, step counter, task seeds, uploads, verdicts, ledger.",
        one("swarmrl.coordinator.cli", "coordinator"),
    ),
    "admin": Command(
        "Operator commands against a running coordinator (admin token from the environment).",
        app_of("swarmrl.coordinator.cli", "admin"),
    ),
    "status": Command(
        "Print a swarm run's summary: step and rate, reward by step, nodes, rejections, validator backlog.",
        one("swarmrl.coordinator.status", "status"),
    ),
    "serve": Command(
        "Serve a checkpoint over an OpenAI-compatible API: /v1/completions and /v1/chat/completions.",
        one("swarmrl.serve.cli", "serve"),
    ),
    "relay": Command(
        "Mirror checkpoints from upstream, verify every shard against the trainer's signature, serve them.",
        one("swarmrl.shardcast.cli", "relay"),
    ),
    "shardcast": Command(
        "Checkpoint broadcast: origin, publish, fetch.",
        group(
            "swarmrl.shardcast.cli",
            "Checkpoint broadcast: origin, publish, fetch.",
            {"origin": "origin", "publish": "publish", "fetch": "fetch"},
        ),
    ),
    "diloco": Command(
        "Run DiLoCo (or DDP) with N local workers on gloo and print eval loss, bytes and compute utilisation.",
        one("swarmrl.diloco.cli", "diloco"),
    ),
    "diloco-replica": Command(
        "One elastic DiLoCo replica on torchft (start a lighthouse first: `torchft_lighthouse --min_replicas 2`).",
        one("swarmrl.diloco.cli", "diloco_replica"),
    ),
    "tasks": Command(
        "Inspect and filter task sources; check, sign, archive and submit community task packs.",
        group(
            "swarmrl.tasks.cli",
            "Inspect and filter task sources; check, sign, archive and submit community task packs.",
            {
                "preview": "preview_generator",
                "filter-band": "filter_band",
                "check": "check_pack",
                "sign": "sign_pack",
                "pack": "archive_pack",
                "submit": "swarmrl.cli.packs:submit_pack",
                "status": "swarmrl.cli.packs:pack_status",
            },
        ),
    ),
}


def keep_brackets(command):
    """Help text is printed as rich markup, where `[shardcast]` or `[throttle]` would vanish as unknown tags:
    escape every help string of the command (and of its subcommands) so it prints as written."""
    if command.help:
        command.help = escape(command.help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        keep_brackets(sub)
    return command


class _Summary(TyperCommand):
    """Stands in for a command in `swarmrl --help` (and command suggestions) until it is run."""


class _CommandsGroup(TyperGroup):
    """The top-level group: commands are listed from their summaries and imported when they run; a failure
    at a command's boundary goes through `failures.fail` (one line and exit 2 when it is expected)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, entry in COMMANDS.items():
            self.commands.setdefault(name, _Summary(name, help=escape(entry.summary)))

    # typer hands its groups a typer.Context; the base class names its private vendored click's Context.
    def invoke(self, ctx: typer.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            explain_missing(ctx.invoked_subcommand, exc)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:
            fail(exc)
            raise

    def resolve_command(self, ctx: typer.Context, args: list[str]):  # type: ignore[override]
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, _Summary):
            assert name is not None  # a listed command resolved by its name
            try:
                command = keep_brackets(typer.main.get_command(COMMANDS[name].load()))
            except ModuleNotFoundError as exc:
                explain_missing(name, exc)
            command.name = name
            self.commands[name] = command
        return name, command, rest


app = typer.Typer(
    cls=_CommandsGroup,
    add_completion=False,
    no_args_is_help=True,
    help=escape((__doc__ or "").split("\n\n")[0]),
)


@app.callback()
def main(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", envvar=VERBOSE_ENV, help="debug messages and tracebacks too")
    ] = False,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            envvar=LOG_FORMAT_ENV,
            help="rich (terminal), plain or json lines (logger, pid); auto: rich on a TTY, plain elsewhere",
        ),
    ] = "auto",
) -> None:
    configure_logging(log_format, logging.DEBUG if verbose else logging.INFO)
    # Every process a command starts (a launcher's roles, their torchrun ranks) logs the same way.
    if log_format != "auto":
        os.environ[LOG_FORMAT_ENV] = log_format
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    take_failure_pipe()
