"""The `swarmrl` command: one subcommand per role, plus the local launchers (demo, rl, sft)."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from swarmrl.cli_options import ADVERTISE_HELP, advertise_url_option
from swarmrl.configs import ConfigError, RunConfig, load_config
from swarmrl.configs.devices import DEVICE_HELP, InvalidDevice, check_device
from swarmrl.devices import DeviceUnavailable, check_run_devices
from swarmrl.logs import LOG_FORMAT_ENV, LogFormat, configure_logging


@dataclass(frozen=True)
class RoleCommand:
    """A command that lives with its role; imported only when it runs or its own help is asked for."""

    summary: str  # the line `swarmrl --help` lists (a test keeps it equal to the command's own)
    load: Callable[[], typer.Typer]


def _one(module: str, function: str) -> Callable[[], typer.Typer]:
    def load() -> typer.Typer:
        single = typer.Typer(add_completion=False)
        single.command()(getattr(importlib.import_module(module), function))
        return single

    return load


def _group(module: str, help: str, commands: dict[str, str]) -> Callable[[], typer.Typer]:
    def load() -> typer.Typer:
        loaded = importlib.import_module(module)
        group = typer.Typer(help=help, no_args_is_help=True, add_completion=False)
        for name, function in commands.items():
            group.command(name)(getattr(loaded, function))
        return group

    return load


def _typer(module: str, attribute: str) -> Callable[[], typer.Typer]:
    return lambda: getattr(importlib.import_module(module), attribute)


# Each pulls in what its role needs (sqlalchemy, aiohttp, torch ...); `swarmrl --help` and the light roles
# (coordinator, relay, admin) must not pay for the others.
ROLE_COMMANDS = {
    "coordinator": RoleCommand(
        "Run the coordinator: identities, heartbeats, step counter, task seeds, uploads, verdicts, ledger.",
        _one("swarmrl.coordinator.cli", "coordinator"),
    ),
    "admin": RoleCommand(
        "Operator commands against a running coordinator (admin token from the environment).",
        _typer("swarmrl.coordinator.cli", "admin"),
    ),
    "status": RoleCommand(
        "Print a swarm run's summary: step and rate, reward by step, nodes, rejections, validator backlog.",
        _one("swarmrl.coordinator.status", "status"),
    ),
    "diloco": RoleCommand(
        "Run DiLoCo (or DDP) with N local workers on gloo and print eval loss, bytes and compute utilisation.",
        _one("swarmrl.diloco.cli", "diloco"),
    ),
    "diloco-replica": RoleCommand(
        "One elastic DiLoCo replica on torchft (start a lighthouse first: `torchft_lighthouse --min_replicas 2`).",
        _one("swarmrl.diloco.cli", "diloco_replica"),
    ),
    "tasks": RoleCommand(
        "Inspect and filter task sources.",
        _group(
            "swarmrl.tasks.cli",
            "Inspect and filter task sources.",
            {"preview": "preview_generator", "filter-band": "filter_band"},
        ),
    ),
    "serve": RoleCommand(
        "Serve a checkpoint over an OpenAI-compatible API: /v1/completions and /v1/chat/completions.",
        _one("swarmrl.serve.cli", "serve"),
    ),
    "relay": RoleCommand(
        "Mirror checkpoints from upstream, verify every shard against the trainer's signature, serve them.",
        _one("swarmrl.shardcast.cli", "relay"),
    ),
    "shardcast": RoleCommand(
        "Checkpoint broadcast: origin, publish, fetch.",
        _group(
            "swarmrl.shardcast.cli",
            "Checkpoint broadcast: origin, publish, fetch.",
            {"origin": "origin", "publish": "publish", "fetch": "fetch"},
        ),
    ),
}


# Modules of optional dependencies → the extra that installs them (see pyproject.toml; a test keeps them in step).
MODULE_EXTRAS = {
    "torch": "model",
    "transformers": "model",
    "tokenizers": "model",
    "safetensors": "model",
    "math_verify": "tasks",
    "reasoning_gym": "tasks",
    "fastapi": "coordinator",
    "uvicorn": "coordinator",
    "sqlalchemy": "coordinator",
    "aiohttp": "relay",
    "matplotlib": "trainer",
    "psycopg": "postgres",
    "datasets": "hub",
    "boto3": "s3",
    "tensorboard": "metrics",
    "wandb": "metrics",
    "torchft": "elastic",
    "peft": "lora",
}
# Extras named after a role command, and the smaller extras each one installs (pyproject.toml; tested).
ROLE_EXTRAS = {
    "coordinator": {"coordinator"},
    "relay": {"relay"},
    "worker": {"model", "tasks", "relay"},
    "validator": {"model", "tasks", "relay"},
    "trainer": {"model", "tasks", "relay", "trainer"},
    "diloco": {"model"},
    "serve": {"model", "coordinator"},
}


def missing_extra(command: str | None, module: str) -> str | None:
    """The extra to install when `command` failed to import `module`; None when no extra provides it.

    The command's own extra when it has one that covers the module, else the module's opt-in extra
    (postgres, s3, ...), else `all`, which holds every role's dependencies.
    """
    extra = MODULE_EXTRAS.get(module)
    if extra is None:
        return None
    if extra in ROLE_EXTRAS.get(command or "", set()):
        return command
    return "all" if any(extra in extras for extras in ROLE_EXTRAS.values()) else extra


class _RoleSummary(TyperCommand):
    """Stands in for a role command in `swarmrl --help` (and command suggestions) until it is run."""


class _RolesGroup(TyperGroup):
    """The top-level group: role commands are listed from their summaries and imported when they run."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, role in ROLE_COMMANDS.items():
            self.commands.setdefault(name, _RoleSummary(name, help=role.summary))

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            _explain_missing(ctx.invoked_subcommand, exc)

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, _RoleSummary):
            try:
                command = typer.main.get_command(ROLE_COMMANDS[name].load())
            except ModuleNotFoundError as exc:
                _explain_missing(name, exc)
            command.name = name
            self.commands[name] = command
        return name, command, rest


def _explain_missing(command: str | None, exc: ModuleNotFoundError) -> NoReturn:
    """Name the extra that provides the missing module; re-raise when no extra does (a real bug)."""
    module = (exc.name or "").split(".")[0]
    extra = missing_extra(command, module)
    if extra is None:
        raise exc
    typer.echo(
        f"swarmrl {command} needs {module}, which this installation lacks: pip install 'swarmrl[{extra}]'",
        err=True,
    )
    raise typer.Exit(1) from exc


app = typer.Typer(cls=_RolesGroup, add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()

ConfigArg = Annotated[str | None, typer.Argument(help="run config TOML, optionally written @path")]
Overrides = Annotated[list[str] | None, typer.Argument(help="section.field=value overrides")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="print the resolved config and exit")]


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug messages too")] = False,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            envvar=LOG_FORMAT_ENV,
            help="rich (terminal), plain or json lines (logger, pid); auto: rich on a TTY, plain elsewhere",
        ),
    ] = "auto",
) -> None:
    configure_logging(log_format, logging.DEBUG if verbose else logging.INFO)


def _config(path: str | None, overrides: list[str] | None, dry_run: bool, pin: bool = True) -> RunConfig:
    """The run config; `pin`: record the source hashes of the code of yours it names (the launchers; a swarm
    node is handed a config that holds them)."""
    from swarmrl.entrypoints import EntryError

    try:
        config = load_config(path, overrides or [])
        if pin:
            from swarmrl.launch.pins import pin_run_code

            pin_run_code(config)
    except (ConfigError, EntryError) as exc:
        console.print(f"config error: {exc}", style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc
    if dry_run:
        console.print_json(config.dump_json())
        raise typer.Exit(0)
    return config


@app.command()
def demo(
    config: ConfigArg = None,
    overrides: Overrides = None,
    dry_run: DryRun = False,
    swarm: Annotated[
        bool, typer.Option("--swarm", help="the decentralized swarm: coordinator, relay, nodes, a cheater")
    ] = False,
    islands: Annotated[
        bool,
        typer.Option(
            "--islands", help="trainer islands, each with its workers, merged by DiLoCo every H steps"
        ),
    ] = False,
    wan: Annotated[
        bool,
        typer.Option(
            "--wan", help="the swarm across emulated regions (latency, loss, narrow links, churn) vs loopback"
        ),
    ] = False,
) -> None:
    """SFT a tiny model, then asynchronous RL: with local workers (held-out accuracy before and after), or with
    --swarm as a swarm of processes on 127.0.0.1 (live table; the cheater is rejected and banned), or with
    --islands as several trainer islands merged every H steps (islands_result.json), or with --wan as the swarm
    spread over emulated regions and measured against loopback (wan_result.json; needs root)."""
    default = (
        "configs/demo-swarm.toml"
        if swarm
        else "configs/demo-islands.toml"
        if islands
        else "configs/demo-wan.toml"
        if wan
        else "configs/demo.toml"
    )
    cfg = _config(config or default, overrides, dry_run)
    with _refuse_unavailable_device():
        check_run_devices(cfg)
    if wan:
        _run_wan_demo(cfg)
        return
    with _supervising():
        if islands:
            from swarmrl.islands.demo import run_islands_demo

            run_islands_demo(cfg, console)
        elif swarm:
            from swarmrl.launch.swarm import run_swarm_demo

            if run_swarm_demo(cfg, console).failures():
                raise typer.Exit(1)
        else:
            from swarmrl.launch.demo import run_demo

            run_demo(cfg, console)


@app.command()
def rl(config: ConfigArg = None, overrides: Overrides = None, dry_run: DryRun = False) -> None:
    """Asynchronous RL on this machine: a trainer and N workers sharing a run directory (resumes if present)."""
    cfg = _config(config, overrides, dry_run)
    from swarmrl.launch.local import run_local
    from swarmrl.launch.prepare import prepare_run

    with _refuse_unavailable_device():
        check_run_devices(cfg)
    with _supervising():
        run_local(cfg, prepare_run(cfg), console=console)


def _run_wan_demo(cfg: RunConfig) -> None:
    """`demo --wan`: a machine that cannot emulate (not root, no iproute2/nftables) is told so in one line."""
    from swarmrl.launch.wan import run_wan_demo
    from swarmrl.wan.errors import WanError, WanUnavailable

    with _supervising():
        try:
            result = run_wan_demo(cfg, console)
        except WanUnavailable as exc:
            console.print(str(exc), style="red", markup=False, highlight=False)
            raise typer.Exit(2) from exc
        except WanError as exc:
            console.print(f"the WAN emulation failed: {exc}", style="red", markup=False, highlight=False)
            raise typer.Exit(1) from exc
    if not (result["goals"]["0 honest files lost"] and result["goals"]["no unit trained twice"]):
        raise typer.Exit(1)


@contextmanager
def _supervising():
    """Around a launcher that starts role processes (`demo`, `rl`). Told to stop (SIGTERM, as `kill` and service
    managers send), the launcher unwinds like Ctrl-C does, so its `finally` stops every role process it started
    instead of leaving them running. A role process that failed ends it with that process's own message and
    log tail, not a traceback through the supervisor's code."""
    import signal

    from swarmrl.launch.processes import LaunchError

    previous = signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    try:
        yield
    except LaunchError as exc:
        console.print(str(exc), style="red", markup=False, highlight=False)
        raise typer.Exit(1) from exc
    finally:
        signal.signal(signal.SIGTERM, previous)


@app.command()
def sft(config: ConfigArg = None, overrides: Overrides = None, dry_run: DryRun = False) -> None:
    """Warm-start a policy by supervised training on task demonstrations; writes checkpoints/step_0."""
    cfg = _config(config, overrides, dry_run)
    from swarmrl.launch.prepare import prepare_run

    rundir = prepare_run(cfg)
    console.print(f"starting policy: {rundir.checkpoints / 'step_0'}")


CoordinatorUrl = Annotated[
    str | None, typer.Option("--coordinator", help="coordinator URL: run as a node of that swarm")
]
NodeKey = Annotated[
    Path | None, typer.Option("--key", help="this node's Ed25519 private key (PEM; created if missing)")
]
RunId = Annotated[
    str | None, typer.Option("--run-id", help="swarm run to join (default and required: the config's run id)")
]
RunConfigFile = Annotated[
    Path | None, typer.Option("--config", help="the run's config (TOML or its config.json)")
]
Relays = Annotated[
    list[str] | None, typer.Option("--relay", help="shardcast relay or origin URL (repeatable)")
]
WorkDir = Annotated[
    Path | None, typer.Option("--work-dir", help="this node's own files (checkpoints, rollouts)")
]


def _device_option(value: str | None) -> str | None:
    try:
        return None if value is None else check_device(value)
    except InvalidDevice as exc:
        raise typer.BadParameter(str(exc)) from exc


Device = Annotated[
    str | None,
    typer.Option("--device", callback=_device_option, help=f"where the model runs: {DEVICE_HELP}"),
]


@contextmanager
def _refuse_unavailable_device():
    """A GPU the machine lacks, or code of yours (reward function, environment) missing or other than the run
    pinned, ends the role at startup with its own message, not a traceback."""
    from swarmrl.entrypoints import EntryError

    try:
        yield
    except (DeviceUnavailable, EntryError) as exc:
        console.print(str(exc), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc


def _local_run_dir(run_dir: Path | None) -> Path:
    """A worker or validator runs either locally on a run directory or as a node of a swarm."""
    if run_dir is None:
        raise typer.BadParameter("give --run-dir (local run) or --coordinator (swarm)")
    return run_dir


def _node_args(run_id, config_file, key, relays, work_dir) -> tuple[RunConfig, str]:
    """The run config and run id of a swarm node; the run id is the config's (`run.run_id`, else its name)."""
    missing = [
        flag
        for flag, value in (
            ("--config", config_file),
            ("--key", key),
            ("--relay", relays),
            ("--work-dir", work_dir),
        )
        if not value
    ]
    if missing:
        raise typer.BadParameter(f"a swarm node also needs {', '.join(missing)}", param_hint="--coordinator")
    config = _config(str(config_file), [], False, pin=False)
    if run_id is not None and run_id != config.run.id:
        # Seeds and signatures bind the config's run id: a node of another id would have all its work rejected.
        raise typer.BadParameter(f"--run-id {run_id!r} differs from the config's run id {config.run.id!r}")
    return config, config.run.id


OriginHost = Annotated[
    str | None,
    typer.Option(help="address the shardcast origin of a swarm binds (default: [shardcast] origin_host)"),
]
OriginPort = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=65535,
        help="port of the shardcast origin of a swarm, 0: OS picks (default: [shardcast] origin_port)",
    ),
]
OriginAdvertise = Annotated[
    str | None,
    typer.Option(
        help=f"{ADVERTISE_HELP}; relays are given it (default: [shardcast] advertise_url)",
        callback=advertise_url_option,
    ),
]


def _origin_overrides(host: str | None, port: int | None, advertise: str | None) -> dict[str, object]:
    """The [shardcast] origin fields the command line sets (the rest stay the run config's)."""
    given = {"origin_host": host, "origin_port": port, "advertise_url": advertise}
    return {field: value for field, value in given.items() if value is not None}


@app.command()
def trainer(
    run_dir: Annotated[Path, typer.Option(help="run directory prepared by `swarmrl rl` or `sft`")],
    threads: Annotated[int, typer.Option(help="torch CPU threads")] = 1,
    coordinator_url: CoordinatorUrl = None,
    key: NodeKey = None,
    origin_host: OriginHost = None,
    origin_port: OriginPort = None,
    origin_advertise: OriginAdvertise = None,
) -> None:
    """The trusted trainer: of a local run, or with --coordinator of a swarm (it then serves a shardcast origin)."""
    from swarmrl.launch.roles import trainer_role

    origin = _origin_overrides(origin_host, origin_port, origin_advertise)
    with _refuse_unavailable_device():
        trainer_role(run_dir, threads=threads, coordinator_url=coordinator_url, key=key, origin=origin)


@app.command("island-trainer")
def island_trainer(
    run_dir: Annotated[Path, typer.Option(help="this island's run directory (prepared by demo --islands)")],
    island: Annotated[int, typer.Option(help="island number: its member id in the merge quorum")],
    lighthouse: Annotated[str, typer.Option(help="address of the islands' torchft lighthouse")],
    threads: Annotated[int, typer.Option(help="torch CPU threads")] = 1,
    coordinator_url: CoordinatorUrl = None,
    key: NodeKey = None,
    origin_host: OriginHost = None,
    origin_port: OriginPort = None,
    origin_advertise: OriginAdvertise = None,
) -> None:
    """One trainer island: the trainer of a local run or, with --coordinator, of the island's own swarm (merged
    policies then go out through its shardcast origin), merged with the other islands every H steps."""
    from swarmrl.islands.island import island_trainer_role

    island_trainer_role(
        run_dir,
        island,
        lighthouse,
        threads=threads,
        coordinator_url=coordinator_url,
        key=key,
        origin=_origin_overrides(origin_host, origin_port, origin_advertise),
    )


@app.command()
def worker(
    run_dir: Annotated[Path | None, typer.Option(help="run directory of a local run")] = None,
    index: Annotated[int, typer.Option(help="worker number, names its key and files")] = 0,
    coordinator_url: CoordinatorUrl = None,
    run_id: RunId = None,
    config: RunConfigFile = None,
    key: NodeKey = None,
    relay: Relays = None,
    work_dir: WorkDir = None,
    cheat: Annotated[
        str | None, typer.Option(help="misbehave on purpose (demo and tests): half-layers")
    ] = None,
    max_batches: Annotated[int | None, typer.Option(help="stop after this many submissions")] = None,
    slowdown: Annotated[
        float,
        typer.Option(
            min=1.0, help="simulate a slower machine (demo and tests): each unit takes N times as long"
        ),
    ] = 1.0,
    device: Device = None,
) -> None:
    """An inference worker: of a local run (--run-dir), or a permissionless node of a swarm (--coordinator).
    --device overrides the config's worker.device."""
    if coordinator_url is None:
        from swarmrl.launch.roles import worker_role

        with _refuse_unavailable_device():
            worker_role(_local_run_dir(run_dir), index, device)
        return
    from swarmrl.worker.node import NodeEjected, NodeOptions, run_node

    cfg, run_id = _node_args(run_id, config, key, relay, work_dir)
    if device is not None:
        cfg.worker.device = device
    if cheat not in (None, "half-layers"):
        raise typer.BadParameter(f"unknown cheat {cheat!r}", param_hint="--cheat")
    options = NodeOptions(
        coordinator_url, run_id, key, relay, work_dir, cheat=cheat, max_batches=max_batches, slowdown=slowdown
    )
    _stop_on_sigterm(options.stop)
    try:
        with _refuse_unavailable_device():
            submitted = run_node(cfg, options)
    except NodeEjected as exc:
        console.print(f"[red]refused by the coordinator:[/red] {exc}")
        raise typer.Exit(3) from exc
    console.print(f"submitted {submitted} rollout file(s)")


def _stop_on_sigterm(stop) -> None:
    import signal

    signal.signal(signal.SIGTERM, lambda *_: stop.set())


@app.command("filter")
def filter_tasks(
    config: ConfigArg = None,
    overrides: Overrides = None,
    output: Annotated[Path, typer.Option(help="JSONL of the tasks with their solve rates")] = Path(
        "tasks_rated.jsonl"
    ),
    k: Annotated[int, typer.Option(help="samples per task (pass@k)")] = 8,
    num_tasks: Annotated[
        int, typer.Option(help="tasks measured, from the start of the training source")
    ] = 512,
    checkpoint: Annotated[
        Path | None, typer.Option(help="policy to measure; default the run's step_0")
    ] = None,
    dry_run: DryRun = False,
) -> None:
    """Offline difficulty filter: write each task's solve rate under a policy (keep a band with tasks.solve_rate_band)."""
    cfg = _config(config, overrides, dry_run)
    from swarmrl.launch.filter import run_filter, solve_rate_histogram
    from swarmrl.launch.prepare import prepare_run

    policy = checkpoint or prepare_run(cfg).checkpoints / "step_0"
    rated = run_filter(cfg, policy, output, num_tasks, k)
    lo, hi = cfg.tasks.solve_rate_band or (0.1, 0.8)
    kept = sum(lo <= (t.solve_rate or 0.0) <= hi for t in rated)
    console.print(f"solve rates of {len(rated)} tasks (pass@{k}) written to {output}")
    console.print({f"{rate:.3f}": n for rate, n in solve_rate_histogram(rated, k).items()})
    console.print(f"{kept} of {len(rated)} tasks lie in the band [{lo}, {hi}]")


validator_app = typer.Typer(help="The validator: judge rollout files; `calibrate` its thresholds.")
app.add_typer(validator_app, name="validator")


@validator_app.callback(invoke_without_command=True)
def validator(
    ctx: typer.Context,
    run_dir: Annotated[
        Path | None, typer.Option(help="local run directory: config, checkpoints, and where accepted rows go")
    ] = None,
    submissions: Annotated[
        Path | None, typer.Option(help="directory of step_k/*.parquet; default <run>/rollouts")
    ] = None,
    once: Annotated[bool, typer.Option(help="judge what is there and exit")] = False,
    coordinator_url: CoordinatorUrl = None,
    run_id: RunId = None,
    config: RunConfigFile = None,
    key: NodeKey = None,
    relay: Relays = None,
    work_dir: WorkDir = None,
    device: Device = None,
) -> None:
    """Check submitted rollout files (TOPLOC, seeded replay, prompts, rewards ...): those of a local run
    directory, or with --coordinator the pending submissions of a swarm, posting verdicts. The prefill is
    recomputed on --device (default cpu)."""
    if ctx.invoked_subcommand is not None:
        return
    device = device or "cpu"
    if coordinator_url is None:
        from swarmrl.validator.service import run_validator

        with _refuse_unavailable_device():
            judged = run_validator(_local_run_dir(run_dir), submissions, once=once, device=device)
        console.print(f"judged {judged} file(s)")
        return
    from swarmrl.validator.node import ValidatorOptions, ValidatorStopped, run_validator_node

    cfg, run_id = _node_args(run_id, config, key, relay, work_dir)
    options = ValidatorOptions(coordinator_url, run_id, key, relay, work_dir, device=device)
    _stop_on_sigterm(options.stop)
    try:
        with _refuse_unavailable_device():
            posted = run_validator_node(cfg, options)
    except ValidatorStopped:
        posted = 0
    console.print(f"posted {posted} verdict(s)")


@validator_app.command("calibrate")
def validator_calibrate(
    config: ConfigArg = "configs/demo.toml",
    overrides: Overrides = None,
    completions: Annotated[int, typer.Option(help="completions per honest setting and per attack")] = 64,
    safety: Annotated[float, typer.Option(help="tolerance = safety × the worst honest value")] = 4.0,
    output: Annotated[Path | None, typer.Option(help="write every measurement and the rates as JSON")] = None,
) -> None:
    """Honest rollouts across attention kernels, thread counts and batch sizes, plus each attack: print the
    false-reject and miss rate of every numeric check and the tolerances chosen from the honest worst case."""
    from swarmrl.launch.calibration import run_calibration

    run_calibration(_config(config, overrides, False), completions, safety, output, console)


if __name__ == "__main__":
    app()
