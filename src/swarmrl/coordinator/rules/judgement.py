"""What one judgement of a file does, whoever made it: a validator's verdict, the trainer's audit of a file the
spot-check draw left unjudged, or the coordinator's own refusal of claims outside the unit's bounds.

An accepted file is credited with the rows and tokens the judge measured in the file itself, never with what
the node claimed, and the time its unit took measures its node's speed (nothing else does: `leases.py`). A rejection drops the file (soft) or, for a forgery (hard), voids the node's unpaid work,
ejects it and, at the threshold, bans it (`penalties.py`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import Measured
from swarmrl.coordinator.rules import leases, ledger
from swarmrl.coordinator.rules.penalties import hard_invalidate
from swarmrl.coordinator.store.db import Membership, Run, Submission, Verdict, WorkUnit

COORDINATOR_JUDGE = "coordinator"  # judge key of the coordinator's own refusals (claims out of bounds)


def judge(
    session: Session,
    submission: Submission,
    judge_key: str,
    measured: Measured,
    config: CoordinatorConfig,
    now: float,
    rewards_summary: dict[str, Any] | None = None,
) -> Verdict:
    """Record the judgement of `submission` and apply it: credit, drop or penalty."""
    severity = None if measured.accept else config.severity_of(measured.check)
    verdict = Verdict(
        submission_id=submission.id,
        validator_key=judge_key,
        accepted=measured.accept,
        check_name=measured.check,
        reason=measured.reason,
        severity=severity,
        rewards_summary=rewards_summary or {},
        decided_at=now,
    )
    session.add(verdict)
    ledger.settle(session, submission.run_id, now)
    submission.status = "accepted" if measured.accept else "rejected"
    submission.judge_key, submission.judge_until = judge_key, None
    unit = session.scalar(select(WorkUnit).where(WorkUnit.submission_id == submission.id))
    if unit is not None:
        unit.status, unit.ended_at = submission.status, now
    if measured.accept:
        assert measured.rows is not None and measured.tokens is not None  # Measured's validator
        ledger.credit(session, submission, measured.rows, measured.tokens, now, config.credit_unlock_window_s)
        if submission.checked:  # a validator's acceptance: what probation, trust and speed count
            session.execute(
                update(Membership)
                .where(Membership.run_id == submission.run_id, Membership.node_id == submission.node_id)
                .values(judged_accepted=Membership.judged_accepted + 1)
            )
            member = session.get(Membership, (submission.run_id, submission.node_id), populate_existing=True)
            if unit is not None and member is not None:
                leases.measure_accepted(session, member, unit, submission.submitted_at, config)
    elif severity == "hard":
        # Spot-checking judges only a fraction of files, so one caught forgery must cost everything.
        threshold = 1 if config.spot_check_fraction < 1.0 else config.hard_rejects_before_ban
        session.flush()
        hard_invalidate(session, submission, threshold, now)
    return verdict


def claims_out_of_bounds(run: Run, rows: int, tokens: int) -> str | None:
    """Why a file's claimed rows and tokens cannot be a unit's file of this run (None: they can). An honest node
    claims what its file holds, so a claim outside the run's bounds is a lie, whatever the file is."""
    if run.unit_rows is None or run.unit_max_tokens is None:
        return None
    if rows != run.unit_rows:
        return f"claimed {rows} rows; a unit's file holds {run.unit_rows}"
    most = rows * run.unit_max_tokens
    if not rows <= tokens <= most:
        return f"claimed {tokens} tokens; {rows} rows hold between {rows} and {most}"
    return None
