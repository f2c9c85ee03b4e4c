"""`swarmrl status --coordinator URL`: the dashboard's summary in the terminal (one read, or --watch)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from swarmrl.coordinator.api import ISLANDS_PREFIX, MetricPoint, RunSummary
from swarmrl.coordinator.client import PublicReads
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.transport import SHORT_RETRY

OFF_TERMINAL_WIDTH = 1000  # wide enough for every column of the nodes table: tables keep their natural width
NODE_COLUMNS = ("held", "accepted", "rejected", "pending", "trained", "credit_tokens", "wiped_tokens")


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def latest_metrics(points: list[MetricPoint]) -> dict[str, tuple[float, int]]:
    """name → (its newest value, the step of it) over the trainer's reported points."""
    return {name: (value, point.step) for point in points for name, value in point.metrics.items()}


def left_out_line(left_out: dict[str, int], noun: str) -> str:
    """`and 9,500 never-proven nodes, 3 banned nodes not shown` (empty when a list left nothing out)."""
    if not left_out:
        return ""
    return "and " + ", ".join(f"{count:,} {tier} {noun}" for tier, count in left_out.items()) + " not shown"


def relays_table(summary: RunSummary) -> Table:
    """Each relay with its upstream (the tree's edges) and what it reports holding. URLs are the relays' own
    claims: escaped, never read as markup; the operator's relays (`operator_relays`) are marked."""
    relays = Table(
        title="SHARDCAST relays",
        title_justify="left",
        caption=left_out_line(summary.relays_left_out, "relays"),
    )
    for column in ("relay", "serves", "mirrors", "state", "complete versions", "served MB"):
        relays.add_column(column, justify="right" if column == "served MB" else "left")
    for relay in summary.relays:
        held = sorted(v.version for v in relay.versions if v.complete)
        relays.add_row(
            relay.node_id[:12] + (" (operator)" if relay.operator else ""),
            escape(relay.url),
            escape(", ".join(relay.upstreams)),
            relay.health,
            ", ".join(map(str, held)) or "-",
            _number(relay.served_bytes / 1e6, 1),
        )
    return relays


def _step(summary: RunSummary) -> str:
    """The open step while the run takes work; once it drains, the last step the trainer trained (the step it
    opened last trains into the next policy, which no step opens)."""
    run = summary.run
    if run.status == "open" or summary.trained_step is None:
        return f"step [bold]{run.current_step}[/bold]"
    return f"trained to step [bold]{summary.trained_step}[/bold]"


def summary_view(summary: RunSummary, url: str) -> Group:
    """The run line, reward and held-out evals by step, island merges, the nodes table, rejections by check,
    the validators and the relays."""
    run, files, backlog, open_step = summary.run, summary.submissions, summary.backlog, summary.open_step
    rewards = [s for s in summary.steps if s.mean_reward is not None]
    curve = " → ".join(f"{s.mean_reward:.3f}@{s.step}" for s in rewards[-6:]) or "no judged files yet"
    evals = (
        " · ".join(
            f"{name} {value:.3f}@{step}"
            for name, (value, step) in sorted(latest_metrics(summary.evals).items())
        )
        or "none reported"
    )
    head = Text.from_markup(
        f"[bold]{run.run_id}[/bold] ({run.status}) · {_step(summary)} · "
        f"{_number(summary.steps_per_minute, 2)} steps/min · dashboard {url.rstrip('/')}/dashboard\n"
        f"files: {files['accepted']} accepted · {files['rejected']} rejected · {files['pending']} pending · "
        f"{files['voided']} voided · validator backlog: {backlog.pending} waiting, {backlog.judging} being judged\n"
        f"open step {open_step.step}: {open_step.accepted}/{open_step.demand} units accepted, "
        f"{open_step.leased} leased, {open_step.open_units} open\n"
        f"reward by step: {curve}\n"
        f"held-out evals: {evals}"
    )
    if summary.islands:  # one merge's figures arrive together: the newest point is the last merge
        last = summary.islands[-1]
        merge = {k.removeprefix(ISLANDS_PREFIX): _number(v) for k, v in last.metrics.items()}
        head.append(
            f"\nDiLoCo island {merge.get('island', '-')} of {merge.get('islands', '-')}: "
            f"{merge.get('round', '-')} merges committed; at step {last.step} "
            f"{merge.get('contributors', '-')} of {merge.get('participants', '-')} islands contributed"
        )
    nodes = Table(
        title=f"nodes ({len(summary.nodes)} of {summary.nodes_total})",
        title_justify="left",
        caption=left_out_line(summary.nodes_left_out, "nodes"),
    )
    for column in ("node", "role", "device", "state", "policy step", *NODE_COLUMNS, "banned", "rejected by"):
        nodes.add_column(
            column.replace("_", " "), justify="left" if column in ("node", "role", "device") else "right"
        )
    for node in summary.nodes:
        nodes.add_row(
            node.node_id[:12],
            node.role,
            node.device or "-",
            node.health if node.status == "active" else node.status,
            _number(node.policy_step),
            *(_number(getattr(node, column)) for column in NODE_COLUMNS),
            "[red]BANNED[/red]" if node.banned else "no",
            ", ".join(f"{check}×{n}" for check, n in sorted(node.rejections.items())) or "-",
        )
    parts: list = [head, nodes]
    if summary.rejections:
        checks = Table(title="rejections by check", title_justify="left")
        checks.add_column("check")
        checks.add_column("files", justify="right")
        for check, count in sorted(summary.rejections.items(), key=lambda item: -item[1]):
            checks.add_row(check, str(count))
        parts.append(checks)
    validators = Table(title="validators", title_justify="left")
    for column in ("validator", "device", "verdicts", "rejected", "judging", "last verdict"):
        validators.add_column(column, justify="left" if column in ("validator", "device") else "right")
    for validator in backlog.validators:
        verdict_at = validator.last_verdict_at
        validators.add_row(
            validator.node_id[:12],
            validator.device or "-",
            str(validator.verdicts),
            str(validator.rejected),
            str(validator.judging),
            "-" if verdict_at is None else f"{max(0.0, summary.generated_at - verdict_at):.0f}s ago",
        )
    parts.append(validators)
    if summary.relays:
        parts.append(relays_table(summary))
    return Group(*parts)


def summary_console() -> Console:
    """Rich at the terminal's width; into a file or a pipe (a log, `| less`, a monitoring script) every table
    at its full width, never cut to rich's default 80 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=OFF_TERMINAL_WIDTH)


def pick_run(client: PublicReads, run_id: str | None) -> str:
    """The run asked for, else the coordinator's open run (the newest when several are), else its newest."""
    if run_id:
        return run_id
    runs = client.runs()
    if not runs:
        raise typer.BadParameter("the coordinator has no run yet", param_hint="--run-id")
    return next((r.run_id for r in runs if r.status == "open"), runs[0].run_id)


def status(
    coordinator: Annotated[str, typer.Option("--coordinator", help="coordinator URL, e.g. http://host:8000")],
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="the run to show (default: the open run, else the newest)")
    ] = None,
    watch: Annotated[
        float, typer.Option(min=0.0, help="refresh every this many seconds until interrupted (0: print once)")
    ] = 0.0,
    json_output: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Print a swarm run's summary: step and rate, reward by step, nodes, rejections, validator backlog."""
    console = summary_console()
    try:
        with PublicReads.at(coordinator, retry=SHORT_RETRY, timeout_s=10.0) as client:
            run = pick_run(client, run_id)
            if json_output:
                console.print_json(client.summary(run).model_dump_json())
                return
            if not watch:
                console.print(summary_view(client.summary(run), coordinator))
                return
            with Live(summary_view(client.summary(run), coordinator), console=console) as live:
                while True:
                    time.sleep(watch)
                    live.update(summary_view(client.summary(run), coordinator))
    except CoordinatorError as exc:
        if exc.status == 0:
            raise  # the boundary names the coordinator that does not answer, in one line
        typer.echo(f"error: {coordinator}: {exc}", err=True)
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        return
