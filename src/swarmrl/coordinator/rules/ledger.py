"""Credit for accepted work: pending until the invalidation window passes, then unlocked; hard rejects wipe it.

Credit is the rows and tokens a trusted node (a validator, or the trainer for a file the spot-check draw left
unjudged) measured in an accepted file, never the node's claim, whether or not the trainer trains on it: a node
is paid for the work the swarm asked of it.
Totals are sums in the database over every entry; only the list of entries is paged.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from swarmrl.coordinator.api import LedgerBalance
from swarmrl.coordinator.store.db import LedgerEntry, Submission
from swarmrl.coordinator.store.rows import rows_changed

LEDGER_STATES = ("pending", "unlocked", "wiped")


def settle(session: Session, run_id: str, now: float) -> int:
    """Unlock every pending entry of the run whose window has passed; returns how many."""
    result = session.execute(
        update(LedgerEntry)
        .where(LedgerEntry.run_id == run_id, LedgerEntry.status == "pending", LedgerEntry.unlock_at <= now)
        .values(status="unlocked", settled_at=now)
    )
    return rows_changed(result)


def credit(
    session: Session, submission: Submission, rows: int, tokens: int, now: float, window_s: float
) -> LedgerEntry:
    """Pending credit for an accepted file: the rows and tokens a trusted node measured in it."""
    entry = LedgerEntry(
        run_id=submission.run_id,
        node_id=submission.node_id,
        submission_id=submission.id,
        tokens=tokens,
        samples=rows,
        status="pending",
        credited_at=now,
        unlock_at=now + window_s,
    )
    session.add(entry)
    return entry


def wipe_pending(session: Session, run_id: str | None, node_id: str, now: float) -> int:
    """Hard invalidation: every still-pending credit of the node (in `run_id`, or in every run) is forfeited."""
    query = update(LedgerEntry).where(LedgerEntry.node_id == node_id, LedgerEntry.status == "pending")
    if run_id is not None:
        query = query.where(LedgerEntry.run_id == run_id)
    result = session.execute(query.values(status="wiped", settled_at=now))
    return rows_changed(result)


def entries_of(
    session: Session, run_id: str, node_id: str | None, limit: int, after_id: int = 0
) -> list[LedgerEntry]:
    query = select(LedgerEntry).where(LedgerEntry.run_id == run_id, LedgerEntry.id > after_id)
    if node_id is not None:
        query = query.where(LedgerEntry.node_id == node_id)
    return list(session.scalars(query.order_by(LedgerEntry.id).limit(limit)))


def balances(
    session: Session,
    run_id: str,
    node_id: str | None = None,
    *,
    node_ids: list[str] | None = None,
    after_node: str = "",
    limit: int | None = None,
) -> list[LedgerBalance]:
    """Per-node totals by status over every entry of the run, sorted by node id (paged by node; `node_ids`: of
    these nodes alone)."""
    nodes = select(LedgerEntry.node_id).where(LedgerEntry.run_id == run_id, LedgerEntry.node_id > after_node)
    if node_id is not None:
        nodes = nodes.where(LedgerEntry.node_id == node_id)
    if node_ids is not None:
        nodes = nodes.where(LedgerEntry.node_id.in_(node_ids))
    nodes = nodes.group_by(LedgerEntry.node_id).order_by(LedgerEntry.node_id)
    if limit is not None:
        nodes = nodes.limit(limit)
    page = list(session.scalars(nodes))
    if not page:
        return []
    totals = {node: LedgerBalance(node_id=node) for node in page}
    sums = session.execute(
        select(
            LedgerEntry.node_id,
            LedgerEntry.status,
            func.coalesce(func.sum(LedgerEntry.tokens), 0),
            func.coalesce(func.sum(LedgerEntry.samples), 0),
        )
        .where(LedgerEntry.run_id == run_id, LedgerEntry.node_id.in_(page))
        .group_by(LedgerEntry.node_id, LedgerEntry.status)
    )
    for node, status, tokens, samples in sums:
        if status in LEDGER_STATES:
            setattr(totals[node], f"{status}_tokens", int(tokens))
            setattr(totals[node], f"{status}_samples", int(samples))
    return [totals[node] for node in page]
