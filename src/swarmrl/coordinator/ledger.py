"""Credit for accepted work: pending until the invalidation window passes, then unlocked; hard rejects wipe it."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from swarmrl.coordinator.api import LedgerBalance
from swarmrl.coordinator.db import LedgerEntry, Submission


def settle(session: Session, run_id: str, now: float) -> int:
    """Unlock every pending entry of the run whose window has passed; returns how many."""
    result = session.execute(
        update(LedgerEntry)
        .where(LedgerEntry.run_id == run_id, LedgerEntry.status == "pending", LedgerEntry.unlock_at <= now)
        .values(status="unlocked", settled_at=now)
    )
    return result.rowcount or 0


def credit(session: Session, submission: Submission, now: float, window_s: float) -> LedgerEntry:
    entry = LedgerEntry(
        run_id=submission.run_id,
        node_id=submission.node_id,
        submission_id=submission.id,
        tokens=submission.tokens,
        samples=submission.rows,
        status="pending",
        credited_at=now,
        unlock_at=now + window_s,
    )
    session.add(entry)
    return entry


def wipe_pending(session: Session, run_id: str, node_id: str, now: float) -> int:
    """Hard invalidation: every still-pending credit of the node in this run is forfeited."""
    result = session.execute(
        update(LedgerEntry)
        .where(LedgerEntry.run_id == run_id, LedgerEntry.node_id == node_id, LedgerEntry.status == "pending")
        .values(status="wiped", settled_at=now)
    )
    return result.rowcount or 0


def entries_of(session: Session, run_id: str, node_id: str | None, limit: int) -> list[LedgerEntry]:
    query = select(LedgerEntry).where(LedgerEntry.run_id == run_id)
    if node_id is not None:
        query = query.where(LedgerEntry.node_id == node_id)
    return list(session.scalars(query.order_by(LedgerEntry.id).limit(limit)))


def balances(entries: Iterable[LedgerEntry]) -> list[LedgerBalance]:
    """Per-node totals by status, sorted by node id."""
    totals: dict[str, LedgerBalance] = {}
    for entry in entries:
        balance = totals.setdefault(entry.node_id, LedgerBalance(node_id=entry.node_id))
        setattr(balance, f"{entry.status}_tokens", getattr(balance, f"{entry.status}_tokens") + entry.tokens)
        setattr(
            balance, f"{entry.status}_samples", getattr(balance, f"{entry.status}_samples") + entry.samples
        )
    return [totals[k] for k in sorted(totals)]
