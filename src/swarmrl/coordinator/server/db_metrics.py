"""Prometheus gauges read from the database at scrape time: nodes by health, submissions, and per run its
storage, the open step's units and each node's work.

`DatabaseMetrics` is a prometheus_client custom collector registered on the app's own registry, so one
`generate_latest` writes the service's counters and these gauges together, and the library writes the text
format: label values are escaped there (a check name is any text a validator sends).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.rules import leases, ledger, storage_room
from swarmrl.coordinator.rules.health import Health, health_of
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.server.stats import node_work, step_work
from swarmrl.coordinator.server.summary import rejections_by_node, validator_backlog
from swarmrl.coordinator.store.db import Ban, Membership, Run, Submission

Sample = tuple[tuple[str, ...], float]  # label values, in the order of the gauge's label names

NODE_COUNTS = (
    "leased",
    "expired",
    "generated",
    "judged",
    "accepted",
    "rejected",
    "voided",
    "trained",
    "stale",
)
UNIT_STATES = ("leased", "submitted", "accepted", "rejected", "expired", "voided", "open_units")
SUBMISSION_STATES = ("pending", "accepted", "rejected", "voided")
PAGE = 1000

# name → (help, label names)
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "swarmrl_coordinator_nodes": ("active run members by health", ("health",)),
    "swarmrl_coordinator_submissions_by_status": ("submissions by status", ("status",)),
    "swarmrl_coordinator_runs": ("runs", ()),
    "swarmrl_coordinator_storage_bytes": ("bytes of uploaded files a run holds or has reserved", ("run",)),
    "swarmrl_coordinator_open_step_units": (
        "units of the open step by state (open_units: still to lease)",
        ("run", "state"),
    ),
    "swarmrl_coordinator_node_work": (
        "a node's work in a run: units leased/expired, files generated .. trained",
        ("run", "node", "count"),
    ),
    "swarmrl_coordinator_node_work_left_out": (
        "members of a run without a file judged and accepted, left out of node_work (keys are free: a series "
        "per key would let anyone grow every scrape without bound)",
        ("run",),
    ),
    "swarmrl_coordinator_node_credit_tokens": (
        "a node's credited tokens by ledger status",
        ("run", "node", "status"),
    ),
    "swarmrl_coordinator_run_draining": (
        "1 while a run takes no new work and judges what was submitted",
        ("run",),
    ),
    "swarmrl_coordinator_run_step": ("a run's current (open) step", ("run",)),
    "swarmrl_coordinator_validator_backlog": (
        "a run's files waiting for a verdict (pending), and those a validator holds under a live lease (judging)",
        ("run", "state"),
    ),
    "swarmrl_coordinator_rejections": (
        "a run's files rejected, by the validator check that rejected them",
        ("run", "check"),
    ),
    "swarmrl_coordinator_nodes_banned": ("members of a run that are banned", ("run",)),
}


class DatabaseMetrics:
    """The gauges of `GAUGES`, read in one transaction at each scrape."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The names, without reading the database: the registry refuses a second metric of the same name."""
        for name, (help_text, labels) in GAUGES.items():
            yield GaugeMetricFamily(name, help_text, labels=labels)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self.state
        now = state.clock()
        with state.sessions() as session, session.begin():
            samples = service_metrics(session, state.config, now)
            for run in session.scalars(select(Run).order_by(Run.run_id)):
                for name, run_samples in run_metrics(session, run, state.config, now).items():
                    samples[name] += run_samples
        for name, (help_text, labels) in GAUGES.items():
            family = GaugeMetricFamily(name, help_text, labels=labels)
            for values, value in samples[name]:
                family.add_metric(values, value)
            yield family


def service_metrics(
    session: Session, config: CoordinatorConfig, now: float
) -> defaultdict[str, list[Sample]]:
    """The gauges over every run: members by health, submissions by status, the number of runs."""
    out: defaultdict[str, list[Sample]] = defaultdict(list)
    by_health = {h.value: 0 for h in Health}
    for member in session.scalars(select(Membership).where(Membership.status == "active")):
        by_health[health_of(member.last_seen, now, config).value] += 1
    out["swarmrl_coordinator_nodes"] = [((health,), count) for health, count in by_health.items()]
    counts = dict(session.execute(select(Submission.status, func.count()).group_by(Submission.status)).all())
    out["swarmrl_coordinator_submissions_by_status"] = [((s,), counts.get(s, 0)) for s in SUBMISSION_STATES]
    out["swarmrl_coordinator_runs"] = [((), session.scalar(select(func.count()).select_from(Run)) or 0)]
    return out


def run_metrics(session: Session, run: Run, config: CoordinatorConfig, now: float) -> dict[str, list[Sample]]:
    """The gauges of one run, by metric name."""
    leases.expire_lapsed(session, run.run_id, config, now)
    out: dict[str, list[Sample]] = defaultdict(list)
    run_id = run.run_id
    out["swarmrl_coordinator_storage_bytes"].append(
        ((run_id,), storage_room.held_bytes(session, run_id, config).total)
    )
    out["swarmrl_coordinator_run_draining"].append(((run_id,), int(run.status == "draining")))
    out["swarmrl_coordinator_run_step"].append(((run_id,), run.current_step))
    backlog = validator_backlog(session, run_id, now)
    for state in ("pending", "judging"):
        out["swarmrl_coordinator_validator_backlog"].append(((run_id, state), getattr(backlog, state)))
    checks: Counter = Counter()
    for node_checks in rejections_by_node(session, run_id).values():
        checks.update(node_checks)
    for check, rejected in sorted(checks.items()):
        out["swarmrl_coordinator_rejections"].append(((run_id, check), rejected))
    banned = session.scalar(
        select(func.count())
        .select_from(Membership)
        .join(Ban, Ban.node_id == Membership.node_id)
        .where(Membership.run_id == run_id)
    )
    out["swarmrl_coordinator_nodes_banned"].append(((run_id,), banned or 0))
    units = step_work(session, run, run.current_step, config, now)
    for state in UNIT_STATES:
        out["swarmrl_coordinator_open_step_units"].append(((run_id, state), getattr(units, state)))
    after, proven, shown = "", max(1, config.lease_proven_files), 0
    while page := node_work(session, run_id, after_node=after, limit=PAGE, judged_accepted=proven):
        shown += len(page)
        for work in page:
            for count in NODE_COUNTS:
                out["swarmrl_coordinator_node_work"].append(
                    ((run_id, work.node_id, count), getattr(work, count))
                )
        after = page[-1].node_id
    members = session.scalar(select(func.count()).select_from(Membership).where(Membership.run_id == run_id))
    out["swarmrl_coordinator_node_work_left_out"].append(((run_id,), (members or 0) - shown))
    after = ""
    while balances := ledger.balances(session, run_id, after_node=after, limit=PAGE):
        for balance in balances:
            for status in ledger.LEDGER_STATES:
                out["swarmrl_coordinator_node_credit_tokens"].append(
                    ((run_id, balance.node_id, status), getattr(balance, f"{status}_tokens"))
                )
        after = balances[-1].node_id
    return out
