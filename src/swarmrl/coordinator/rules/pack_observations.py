"""What the run's trusted judges measured of a pack, and what follows from it.

A validator that judged a pack unit's file tells the scores it gave each completion (null: the verifier failed
on it); the trainer that trained the file tells its own scores, how many of the file's groups its online filter
was offered and how many it kept (informative, trained on). From these:

- a pack on probation is measured (`pack_admission.measurement`) until enough of its rows are, then offered
  to a validator for its last verdict;
- the two judges' scores of the same completions are compared: a difference is a disagreement;
- the author is credited the rows trained in informative groups (`pack_credit`);
- the pack is retired, or refused while on probation, when `pack_retirement` says so.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from swarmrl.configs.task_packs import CommunityTasksConfig
from swarmrl.coordinator.pack_api import PackScores, TrainedPackFile
from swarmrl.coordinator.rules import pack_admission, pack_credit
from swarmrl.coordinator.rules.pack_retirement import PackHealth, Retirement, retirement_of
from swarmrl.coordinator.store.pack_tables import PackObservation, TaskPackRecord

VALIDATOR, TRAINER = "validator", "trainer"


def record_validator_scores(
    session: Session,
    pack: TaskPackRecord,
    body: PackScores,
    step: int,
    validator: str,
    policy: CommunityTasksConfig,
    now: float,
) -> Retirement | None:
    _observe(session, pack, body, step, VALIDATOR, validator, now)
    values = [value for _, scores in body.scores for value in scores]
    pack.completions += len(values)
    pack.failed += sum(value is None for value in values)
    _compare(session, pack, body.submission_id)
    if pack.status == "probation":
        if pack_admission.measured_enough(_rows_measured(session, pack), pack, policy):
            pack.status = "measuring"
    return _retire_if_due(session, pack, policy, now)


def record_trained_file(
    session: Session,
    pack: TaskPackRecord,
    body: TrainedPackFile,
    step: int,
    trainer: str,
    policy: CommunityTasksConfig,
    now: float,
    window_s: float,
) -> Retirement | None:
    observation = _observe(session, pack, body, step, TRAINER, trainer, now)
    observation.groups, observation.kept = body.groups, body.kept
    pack.groups_seen += body.groups
    pack.groups_kept += body.kept
    pack.rows_trained += body.rows_trained
    if body.rows_trained:
        entry = pack_credit.credit_rows(session, pack, body.submission_id, body.rows_trained, now, window_s)
        if pack.retired_for_cause:
            entry.status, entry.settled_at = "wiped", now
    _compare(session, pack, body.submission_id)
    return _retire_if_due(session, pack, policy, now)


def _observe(
    session: Session, pack: TaskPackRecord, body: PackScores, step: int, judge: str, key: str, now: float
) -> PackObservation:
    observation = PackObservation(
        pack_id=pack.id,
        submission_id=body.submission_id,
        judge=judge,
        judge_key=key,
        step=step,
        scores=[[row, list(scores)] for row, scores in body.scores],
        observed_at=now,
    )
    session.add(observation)
    session.flush()  # a second observation of the file by the same kind of judge fails here (unique)
    return observation


def _rows_measured(session: Session, pack: TaskPackRecord) -> int:
    return len(pack_admission.measurement(session, pack))


def scores_differ(first: list, second: list) -> bool:
    """Whether two judges scored any completion of a file differently (a completion either failed on is left
    out: failures are counted on their own)."""
    a, b = dict((row, scores) for row, scores in first), dict((row, scores) for row, scores in second)
    if a.keys() != b.keys() or any(len(a[row]) != len(b[row]) for row in a):
        return True
    return any(
        x != y for row in a for x, y in zip(a[row], b[row], strict=True) if x is not None and y is not None
    )


def _compare(session: Session, pack: TaskPackRecord, submission_id: int) -> None:
    """Once both judges told their scores of the file, count a disagreement if they differ."""
    both = {
        observation.judge: observation.scores
        for observation in session.scalars(
            select(PackObservation).where(
                PackObservation.pack_id == pack.id, PackObservation.submission_id == submission_id
            )
        )
    }
    if len(both) == 2 and scores_differ(both[VALIDATOR], both[TRAINER]):
        pack.disagreements += 1


def health_of(session: Session, pack: TaskPackRecord, window_groups: int) -> PackHealth:
    """The pack's recent record: what validators judged of its last rows and what the trainer's filter kept of
    its last groups, each over the most recent files until about `window_groups` rows."""
    judged_rows = judged = failed = 0
    for (scores,) in _recent(session, pack, VALIDATOR, PackObservation.scores):
        if judged_rows >= window_groups:
            break
        for _, values in scores:
            judged_rows, judged = judged_rows + 1, judged + len(values)
            failed += sum(value is None for value in values)
    groups = kept = 0
    for file_groups, file_kept in _recent(
        session, pack, TRAINER, PackObservation.groups, PackObservation.kept
    ):
        if groups >= window_groups:
            break
        groups, kept = groups + (file_groups or 0), kept + (file_kept or 0)
    return PackHealth(judged_rows, judged, failed, pack.disagreements, groups, kept)


def _recent(session: Session, pack: TaskPackRecord, judge: str, *columns):
    return session.execute(
        select(*columns)
        .where(PackObservation.pack_id == pack.id, PackObservation.judge == judge)
        .order_by(PackObservation.id.desc())
    )


def _retire_if_due(
    session: Session, pack: TaskPackRecord, policy: CommunityTasksConfig, now: float
) -> Retirement | None:
    if pack.status not in ("probation", "measuring", "admitted"):
        return None
    retirement = retirement_of(health_of(session, pack, policy.retirement.window_groups), policy.retirement)
    if retirement is None:
        return None
    if pack.status != "admitted":  # never trained: refused, as admission would have
        pack_admission.refuse(pack, "loads", f"in the run: {retirement.reason}", now)
        pack.checker_key = pack.check_until = None
        return retirement
    pack.status, pack.retired_at, pack.reason = "retired", now, retirement.reason
    if retirement.for_cause:
        pack.retired_for_cause = True
        pack_credit.wipe_pending(session, pack, now)
    return retirement
