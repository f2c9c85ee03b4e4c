"""Hard invalidation and bans: what a caught node loses.

As INTELLECT-2's hard invalidation wipes the pending window, a hard rejection or a ban voids the node's
pending and unpaid work: submissions still waiting for a verdict, and accepted ones whose credit has not
unlocked and that no training step has read, become `voided` (never judged as accepted, never credited, never
in the trainer's feed; a later verdict on them is refused); every pending credit is wiped; the units it held
are freed for other nodes; its open upload slots close. Work already paid (unlocked) or already trained on
stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from swarmrl.coordinator.rules import ledger
from swarmrl.coordinator.store.db import Ban, LedgerEntry, Membership, Node, Submission, UploadSlot, WorkUnit
from swarmrl.coordinator.store.rows import rows_changed


@dataclass(frozen=True)
class Voided:
    submissions: int
    units: int
    wiped_entries: int


def void_unpaid_work(session: Session, node_id: str, run_id: str | None, now: float) -> Voided:
    """Void the node's pending and unpaid work in `run_id` (None: in every run)."""

    def scoped(query, model):
        query = query.where(model.node_id == node_id)
        return query if run_id is None else query.where(model.run_id == run_id)

    # Accepted and unpaid: credit still pending, or none yet (a file the spot-check draw skipped, unmeasured).
    paid = scoped(select(LedgerEntry.submission_id), LedgerEntry).where(LedgerEntry.status == "unlocked")
    doomed = list(
        session.scalars(
            scoped(select(Submission.id), Submission).where(
                (Submission.status == "pending")
                | (
                    (Submission.status == "accepted")
                    & Submission.use_outcome.is_(None)
                    & Submission.id.not_in(paid)
                )
            )
        )
    )
    if doomed:
        session.execute(
            update(Submission)
            .where(Submission.id.in_(doomed))
            .values(status="voided", judge_key=None, judge_until=None)
            .execution_options(synchronize_session=False)
        )
    units = session.execute(
        scoped(update(WorkUnit), WorkUnit)
        .where((WorkUnit.status == "leased") | WorkUnit.submission_id.in_(doomed))
        .values(status="voided", ended_at=now)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        scoped(update(UploadSlot), UploadSlot)
        .where(UploadSlot.submitted.is_(False), UploadSlot.expires_at > now)
        .values(expires_at=now)
        .execution_options(synchronize_session=False)
    )
    wiped = ledger.wipe_pending(session, run_id, node_id, now)
    session.expire_all()  # bulk updates above bypassed the identity map
    return Voided(submissions=len(doomed), units=rows_changed(units), wiped_entries=wiped)


def ban_node(session: Session, node_id: str, reason: str, now: float) -> Voided:
    """Ban the key from every run, eject it everywhere and void its unpaid work in every run."""
    if session.get(Ban, node_id) is None:
        session.add(Ban(node_id=node_id, reason=reason, banned_at=now))
    for member in session.scalars(select(Membership).where(Membership.node_id == node_id)):
        if member.status == "active":
            member.status = "ejected"
    return void_unpaid_work(session, node_id, None, now)


def hard_invalidate(session: Session, submission: Submission, rejects_before_ban: int, now: float) -> Voided:
    """A forged file: void the node's unpaid work in this run, eject it, ban it at the threshold."""
    node = session.get(Node, submission.node_id)
    if node is not None:
        node.hard_rejects += 1
        if node.hard_rejects >= rejects_before_ban:
            return ban_node(session, node.node_id, f"{node.hard_rejects} hard rejections", now)
    member = session.get(Membership, (submission.run_id, submission.node_id))
    if member is not None and member.status == "active":
        member.status = "ejected"
    return void_unpaid_work(session, submission.node_id, submission.run_id, now)
