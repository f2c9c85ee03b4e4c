"""Prometheus gauges read from the database at scrape time: storage, the open step's units, each node's work."""

from __future__ import annotations

from collections import Counter, defaultdict

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.rules import janitor, leases, ledger
from swarmrl.coordinator.server.stats import node_work, step_work
from swarmrl.coordinator.server.summary import rejections_by_node, validator_backlog
from swarmrl.coordinator.store.db import Ban, Membership, Run

Sample = tuple[dict[str, str], float]

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
PAGE = 1000

HELP = {
    "swarmrl_coordinator_storage_bytes": "bytes of uploaded files a run holds or has reserved",
    "swarmrl_coordinator_open_step_units": "units of the open step by state (open_units: still to lease)",
    "swarmrl_coordinator_node_work": "a node's work in a run: units leased/expired, files generated .. trained",
    "swarmrl_coordinator_node_credit_tokens": "a node's credited tokens by ledger status",
    "swarmrl_coordinator_run_draining": "1 while a run takes no new work and judges what was submitted",
    "swarmrl_coordinator_run_step": "a run's current (open) step",
    "swarmrl_coordinator_validator_backlog": "a run's files waiting for a verdict (pending), and those a "
    "validator holds under a live lease (judging)",
    "swarmrl_coordinator_rejections": "a run's files rejected, by the validator check that rejected them",
    "swarmrl_coordinator_nodes_banned": "members of a run that are banned",
}


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _label_value(text: str) -> str:
    """A check name comes from a validator: escaped as the text format requires."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def gauge(name: str, help_text: str, samples: list[Sample]) -> str:
    lines = [f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"]
    lines += [f"{name}{_labels(labels)} {value}\n" for labels, value in samples]
    return "".join(lines)


def run_metrics(session: Session, run: Run, config: CoordinatorConfig, now: float) -> dict[str, list[Sample]]:
    """The gauges of one run, by metric name. Run ids and node ids are validated on the way in (safe labels)."""
    leases.expire_lapsed(session, run.run_id, config, now)
    out: dict[str, list[Sample]] = defaultdict(list)
    base = {"run": run.run_id}
    out["swarmrl_coordinator_storage_bytes"].append((base, janitor.held_bytes(session, run.run_id)))
    out["swarmrl_coordinator_run_draining"].append((base, int(run.status == "draining")))
    out["swarmrl_coordinator_run_step"].append((base, run.current_step))
    backlog = validator_backlog(session, run.run_id, now)
    for state in ("pending", "judging"):
        out["swarmrl_coordinator_validator_backlog"].append(
            ({**base, "state": state}, getattr(backlog, state))
        )
    checks: Counter = Counter()
    for node_checks in rejections_by_node(session, run.run_id).values():
        checks.update(node_checks)
    for check, rejected in sorted(checks.items()):
        out["swarmrl_coordinator_rejections"].append(({**base, "check": _label_value(check)}, rejected))
    banned = session.scalar(
        select(func.count())
        .select_from(Membership)
        .join(Ban, Ban.node_id == Membership.node_id)
        .where(Membership.run_id == run.run_id)
    )
    out["swarmrl_coordinator_nodes_banned"].append((base, banned or 0))
    units = step_work(session, run, run.current_step, config, now)
    for state in UNIT_STATES:
        out["swarmrl_coordinator_open_step_units"].append(({**base, "state": state}, getattr(units, state)))
    after = ""
    while page := node_work(session, run.run_id, after_node=after, limit=PAGE):
        for work in page:
            for count in NODE_COUNTS:
                labels = {**base, "node": work.node_id, "count": count}
                out["swarmrl_coordinator_node_work"].append((labels, getattr(work, count)))
        after = page[-1].node_id
    after = ""
    while balances := ledger.balances(session, run.run_id, after_node=after, limit=PAGE):
        for balance in balances:
            for status in ledger.LEDGER_STATES:
                labels = {**base, "node": balance.node_id, "status": status}
                out["swarmrl_coordinator_node_credit_tokens"].append(
                    (labels, getattr(balance, f"{status}_tokens"))
                )
        after = balances[-1].node_id
    return out


def merge_run_metrics(per_run: list[dict[str, list[Sample]]]) -> list[str]:
    """One HELP/TYPE block per metric with every run's samples under it."""
    return [
        gauge(name, help_text, [sample for run in per_run for sample in run.get(name, [])])
        for name, help_text in HELP.items()
    ]
