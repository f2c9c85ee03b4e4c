"""An author's credit: the rows of its pack the trainer trained on in informative groups, never admission.

One entry per file, pending for the run's invalidation window (`credit_unlock_window_s`) and then unlocked, as
the ledger's; a pack retired for cause (its verifier failed or disagreed between judges) forfeits what is
still pending, as a hard-invalidated node does.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from swarmrl.coordinator.store.pack_tables import PackCredit, TaskPackRecord
from swarmrl.coordinator.store.rows import rows_changed

CREDIT_STATES = ("pending", "unlocked", "wiped")


def credit_rows(
    session: Session, pack: TaskPackRecord, submission_id: int, rows: int, now: float, window_s: float
) -> PackCredit:
    entry = PackCredit(
        run_id=pack.run_id,
        pack_id=pack.id,
        author=pack.author,
        submission_id=submission_id,
        rows=rows,
        status="pending",
        credited_at=now,
        unlock_at=now + window_s,
    )
    session.add(entry)
    return entry


def settle(session: Session, run_id: str, now: float) -> int:
    """Unlock every pending credit of the run whose window has passed; returns how many."""
    result = session.execute(
        update(PackCredit)
        .where(PackCredit.run_id == run_id, PackCredit.status == "pending", PackCredit.unlock_at <= now)
        .values(status="unlocked", settled_at=now)
    )
    return rows_changed(result)


def wipe_pending(session: Session, pack: TaskPackRecord, now: float) -> int:
    result = session.execute(
        update(PackCredit)
        .where(PackCredit.pack_id == pack.id, PackCredit.status == "pending")
        .values(status="wiped", settled_at=now)
    )
    return rows_changed(result)


def credits_by_pack(session: Session, pack_ids: list[int]) -> dict[int, dict[str, int]]:
    """pack id → rows credited by status (pending, unlocked, wiped)."""
    totals: dict[int, dict[str, int]] = {pack_id: dict.fromkeys(CREDIT_STATES, 0) for pack_id in pack_ids}
    if not pack_ids:
        return totals
    sums = session.execute(
        select(PackCredit.pack_id, PackCredit.status, func.sum(PackCredit.rows))
        .where(PackCredit.pack_id.in_(pack_ids))
        .group_by(PackCredit.pack_id, PackCredit.status)
    )
    for pack_id, status, rows in sums:
        totals[pack_id][status] = int(rows or 0)
    return totals
