"""Which files a validator judges when `spot_check_fraction` p < 1, and what becomes of the others.

A node's files are all judged until `spot_check_probation_files` of them were judged and accepted in the run;
after that each file is judged with probability p, drawn with the OS's CSPRNG at submission (a draw a node
could foresee would check nothing). A file the draw skips is accepted into the trainer's feed uncredited: the
trainer checks it before training on it and reports what it measured (`judgement.py`), and a skipped file
whose step leaves the async window unread goes back to the validators, so every credited file was measured by
a trusted node.
"""

from __future__ import annotations

import secrets

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.store.db import Membership, Run, Submission, Verdict, WorkUnit

_DRAW = secrets.SystemRandom()


def must_judge(member: Membership, config: CoordinatorConfig) -> bool:
    """Whether a validator judges the file this member submits now."""
    p = config.spot_check_fraction
    if p >= 1.0:
        return True
    if member.judged_accepted < config.spot_check_probation_files:
        return True  # probation: a fresh identity gets no unchecked file
    return _DRAW.random() < p


def requeue_unmeasured(session: Session, run: Run) -> int:
    """Skipped files no trainer read while their step was in the async window are judged after all."""
    audited = exists().where(Verdict.submission_id == Submission.id)
    ids = list(
        session.scalars(
            select(Submission.id).where(
                Submission.run_id == run.run_id,
                Submission.status == "accepted",
                Submission.checked.is_(False),
                Submission.step < run.current_step - run.async_level,
                ~audited,
            )
        )
    )
    if ids:
        session.execute(
            update(Submission)
            .where(Submission.id.in_(ids))
            .values(status="pending", checked=True)
            .execution_options(synchronize_session=False)
        )
        session.execute(
            update(WorkUnit)
            .where(WorkUnit.submission_id.in_(ids))
            .values(status="submitted")
            .execution_options(synchronize_session=False)
        )
    return len(ids)
