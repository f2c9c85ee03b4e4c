"""Where a pack's admission stands, and what a validator's lease and verdict do to it.

    pending ─lease─► checking ─verdict─► refused
                                     └─► probation ─(enough rows measured)─► measuring ─lease, verdict─► admitted | refused

A check lease holds its lane's reserve (`pack_budget`); a lease that lapses returns the pack to `pending` and
frees the reserve. A report must be the pack's (its digest) and say what its own checks say (the verdict is
recomputed here); at the measure stage the checks that need no policy must read as they did at the check.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from swarmrl.configs.task_packs import CommunityTasksConfig
from swarmrl.coordinator.errors import ApiError, ConflictError
from swarmrl.coordinator.pack_api import Stage
from swarmrl.coordinator.rules import pack_budget
from swarmrl.coordinator.store.pack_tables import PackObservation, TaskPackRecord
from swarmrl.tasks.packs.report import AdmissionReport, verdict_of

CHECK_LEASE_MARGIN_S = 60.0  # past the validators' own cap on one admission: fetching, posting
MEASURE_LEASE_S = 120.0  # the measure stage computes figures from what the run measured: seconds
POLICY_CHECKS = frozenset({"useful", "solvable"})  # the checks that may wait for the run's policy


def release_lapsed(session: Session, run_id: str, now: float) -> None:
    for pack in session.scalars(
        select(TaskPackRecord).where(
            TaskPackRecord.run_id == run_id,
            TaskPackRecord.status.in_(("checking", "measuring")),
            TaskPackRecord.check_until < now,
        )
    ):
        if pack.status == "checking":
            pack.status, pack.lane, pack.reserved_seconds = "pending", None, 0.0
        pack.checker_key, pack.check_until = None, None


def lease_pack(
    session: Session, run_id: str, policy: CommunityTasksConfig, validator: str, now: float
) -> tuple[TaskPackRecord, Stage] | None:
    """The next pack for `validator` and its stage: a pack measured enough first (cheap), then the oldest
    pending pack whose author's lane has room; None when none may be checked now."""
    release_lapsed(session, run_id, now)
    measuring = session.scalar(
        select(TaskPackRecord)
        .where(
            TaskPackRecord.run_id == run_id,
            TaskPackRecord.status == "measuring",
            TaskPackRecord.checker_key.is_(None),
        )
        .order_by(TaskPackRecord.id)
    )
    if measuring is not None:
        measuring.checker_key, measuring.check_until = validator, now + MEASURE_LEASE_S
        return measuring, "measure"
    reserve, budget = policy.admission.seconds, policy.budget
    load = pack_budget.newcomer_load(session, run_id, now)
    pending = session.scalars(
        select(TaskPackRecord)
        .where(TaskPackRecord.run_id == run_id, TaskPackRecord.status == "pending")
        .order_by(TaskPackRecord.id)
        .limit(budget.max_pending)
    )
    for pack in pending:
        earned = pack_budget.earned_seconds(session, run_id, pack.author, budget)
        lane = pack_budget.choose_lane(earned, load, reserve, budget)
        if lane is not None:
            pack.status, pack.lane, pack.reserved_seconds = "checking", lane, reserve
            pack.checker_key, pack.check_until = validator, now + reserve + CHECK_LEASE_MARGIN_S
            return pack, "check"
    return None


def apply_verdict(
    pack: TaskPackRecord, stage: str, report: AdmissionReport, validator: str, now: float
) -> None:
    """Record a validator's report of `stage` and move the pack on; refused when it is not the pack's or not
    consistent with itself."""
    expected = "checking" if stage == "check" else "measuring"
    if pack.status != expected or pack.checker_key != validator:
        raise ConflictError(
            f"pack {pack.id} is {pack.status}; this validator holds no {stage} lease on it", kind="not_leased"
        )
    _check_report(pack, stage, report)
    # A measure-stage report carries the whole admission's time: what the check stage took is charged already.
    before = float((pack.report or {}).get("seconds", 0.0)) if stage == "measure" else 0.0
    pack.admission_seconds += max(0.0, report.seconds - before)
    pack.reserved_seconds, pack.charged_at = 0.0, now
    pack.checker_key, pack.check_until = None, None
    pack.report = report.model_dump(mode="json")
    if report.verdict == "refused":
        refuse(pack, report.refused_by or "loads", _failed_summary(report), now)
    elif stage == "check":
        pack.status = "probation"
    else:
        pack.status, pack.decided_at = "admitted", now


def refuse(pack: TaskPackRecord, check: str, reason: str, now: float) -> None:
    pack.status, pack.refused_by, pack.reason, pack.decided_at = "refused", check, reason[:2000], now


def _check_report(pack: TaskPackRecord, stage: str, report: AdmissionReport) -> None:
    if report.digest != pack.digest:
        raise ApiError(
            f"the report is of pack {report.digest}, not {pack.digest}", kind="wrong_pack", status=422
        )
    if verdict_of(report.checks) != (report.verdict, report.refused_by):
        raise ApiError(
            "the report's verdict is not what its checks say", kind="inconsistent_report", status=422
        )
    waiting = {check.name for check in report.checks if check.status == "pending"}
    if stage == "check" and report.verdict == "admitted":
        raise ApiError(
            "a pack is admitted only once the run's policy measured it", kind="too_early", status=422
        )
    if stage == "check" and report.verdict == "pending" and not waiting <= POLICY_CHECKS:
        raise ApiError(f"checks left pending: {sorted(waiting)}", kind="incomplete_report", status=422)
    if stage == "measure":
        if report.verdict == "pending":
            raise ApiError("the measure stage decides the pack", kind="incomplete_report", status=422)
        before = {check["name"]: check["status"] for check in (pack.report or {}).get("checks", [])}
        changed = [
            c.name for c in report.checks if c.name not in POLICY_CHECKS and before.get(c.name) != c.status
        ]
        if changed:
            raise ApiError(
                f"checks {changed} differ from the check stage's", kind="inconsistent_report", status=422
            )


def _failed_summary(report: AdmissionReport) -> str:
    failed = next((check for check in report.checks if check.name == report.refused_by), None)
    if failed is None:
        return f"refused by {report.refused_by}"
    figures = "; ".join(figure.text() for figure in failed.figures if not figure.ok)
    return f"{failed.name}: {failed.summary}" + (f" ({figures})" if figures else "")


def measurement(session: Session, pack: TaskPackRecord) -> dict[int, tuple[int, int]]:
    """pack row → (samples, samples scoring at least the pack's pass score), over validators' observations;
    a completion its verifier failed on counts as a sample not passed."""
    rows: dict[int, tuple[int, int]] = {}
    observed = session.scalars(
        select(PackObservation.scores).where(
            PackObservation.pack_id == pack.id, PackObservation.judge == "validator"
        )
    )
    for scores in observed:
        for row, values in scores:
            samples, passed = rows.get(row, (0, 0))
            solved = sum(1 for value in values if value is not None and value >= pack.pass_score)
            rows[row] = (samples + len(values), passed + solved)
    return rows


def measured_enough(rows_measured: int, pack: TaskPackRecord, policy: CommunityTasksConfig) -> bool:
    return rows_measured >= min(policy.probation_rows, pack.rows)
