"""Prometheus gauges read from the database at scrape time: storage, the open step's units, each node's work."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy.orm import Session

from swarmrl.coordinator import janitor, leases, ledger
from swarmrl.coordinator.config import CoordinatorConfig
from swarmrl.coordinator.db import Run
from swarmrl.coordinator.stats import node_work, step_work

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
}


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def gauge(name: str, help_text: str, samples: list[Sample]) -> str:
    lines = [f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"]
    lines += [f"{name}{_labels(labels)} {value}\n" for labels, value in samples]
    return "".join(lines)


def run_metrics(session: Session, run: Run, config: CoordinatorConfig, now: float) -> dict[str, list[Sample]]:
    """The gauges of one run, by metric name. Run ids and node ids are validated on the way in (safe labels)."""
    leases.expire_lapsed(session, run.run_id, config, now)
    out: dict[str, list[Sample]] = defaultdict(list)
    base = {"run": run.run_id}
    out["swarmrl_coordinator_storage_bytes"].append((base, janitor.held_bytes(session, run.run_id, now)))
    out["swarmrl_coordinator_run_draining"].append((base, int(run.status == "draining")))
    units = step_work(session, run, run.current_step, config)
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
    while page := ledger.balances(session, run.run_id, after_node=after, limit=PAGE):
        for balance in page:
            for status in ledger.LEDGER_STATES:
                labels = {**base, "node": balance.node_id, "status": status}
                out["swarmrl_coordinator_node_credit_tokens"].append(
                    (labels, getattr(balance, f"{status}_tokens"))
                )
        after = page[-1].node_id
    return out


def merge_run_metrics(per_run: list[dict[str, list[Sample]]]) -> list[str]:
    """One HELP/TYPE block per metric with every run's samples under it."""
    return [
        gauge(name, help_text, [sample for run in per_run for sample in run.get(name, [])])
        for name, help_text in HELP.items()
    ]
