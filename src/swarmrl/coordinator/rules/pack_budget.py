"""What admitting packs may cost the run's validators, against any number of keys (SPEC §9: identities are
free, trust is earned by accepted work only).

A pack is checked on one of two lanes, chosen when a validator leases it:

- **earned**: its author's own allowance, `seconds_per_accepted_row` × the author's accepted work in the run
  (`accepted_work`: the rows a trusted node credited to its key, as a worker and as the author of trained
  pack rows), less what its earlier packs' admissions cost. Accepted work is measured work nobody can split:
  N keys sharing W rows of it earn together what one key with W rows earns, so splitting gains nothing.
- **newcomers**: every author without enough allowance shares `newcomer_seconds_per_hour` of validator time
  per rolling hour, in submission order. N keys together still get one lane; a place in it costs a
  proof-of-work ticket per submission (`tasks/packs/ticket.py`), so flooding it costs compute, not keys.

A check reserves the validators' own cap on one admission (`admission.seconds`) before it starts and is
charged what the validator measured when its verdict comes. A newcomer's check is leased only while what the
lane was charged in the last hour, what its checks in flight reserve and its own reserve fit in the lane, and no
check takes more than its reserve: the validator time spent on packs of keys without accepted work is at most
`newcomer_seconds_per_hour` per rolling hour, whatever the number of keys or validators (a check charged just
after the hour it was leased in may overlap the next by one reserve). Earned time is bounded by the accepted
work behind it. A pack never earns credit by
being checked (`pack_credit`), so junk costs its keys a ticket each and earns 0.

`accepted_work` is the one place that reads what a key has earned; a graded trust figure can replace it.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from swarmrl.configs.task_packs import AdmissionBudgetConfig
from swarmrl.coordinator.store.db import LedgerEntry
from swarmrl.coordinator.store.pack_tables import PackCredit, TaskPackRecord

HOUR_S = 3600.0
Lane = Literal["earned", "newcomers"]
EARNED: Lane = "earned"
NEWCOMERS: Lane = "newcomers"
_NOT_WIPED = ("pending", "unlocked")


def accepted_work(session: Session, run_id: str, key: str) -> int:
    """Rows of accepted work credited to `key` in the run: rollout rows the ledger holds for it (not wiped) and
    rows of its packs trained in informative groups (not wiped)."""
    rollouts = session.scalar(
        select(func.coalesce(func.sum(LedgerEntry.samples), 0)).where(
            LedgerEntry.run_id == run_id, LedgerEntry.node_id == key, LedgerEntry.status.in_(_NOT_WIPED)
        )
    )
    packs = session.scalar(
        select(func.coalesce(func.sum(PackCredit.rows), 0)).where(
            PackCredit.run_id == run_id, PackCredit.author == key, PackCredit.status.in_(_NOT_WIPED)
        )
    )
    return int(rollouts or 0) + int(packs or 0)


def earned_seconds(session: Session, run_id: str, author: str, budget: AdmissionBudgetConfig) -> float:
    """The author's own allowance left: what its accepted work earned, less its packs' checks on that lane."""
    spent = session.scalar(
        select(
            func.coalesce(func.sum(TaskPackRecord.admission_seconds + TaskPackRecord.reserved_seconds), 0.0)
        ).where(
            TaskPackRecord.run_id == run_id, TaskPackRecord.author == author, TaskPackRecord.lane == EARNED
        )
    )
    return budget.seconds_per_accepted_row * accepted_work(session, run_id, author) - float(spent or 0.0)


def newcomer_load(session: Session, run_id: str, now: float) -> float:
    """Validator seconds of the newcomers' lane within the last hour: charged, and reserved by checks running."""
    charged = session.scalar(
        select(func.coalesce(func.sum(TaskPackRecord.admission_seconds), 0.0)).where(
            TaskPackRecord.run_id == run_id,
            TaskPackRecord.lane == NEWCOMERS,
            TaskPackRecord.charged_at > now - HOUR_S,
        )
    )
    reserved = session.scalar(
        select(func.coalesce(func.sum(TaskPackRecord.reserved_seconds), 0.0)).where(
            TaskPackRecord.run_id == run_id, TaskPackRecord.lane == NEWCOMERS
        )
    )
    return float(charged or 0.0) + float(reserved or 0.0)


def choose_lane(
    earned: float, newcomer_load_s: float, reserve_s: float, budget: AdmissionBudgetConfig
) -> Lane | None:
    """The lane a check of `reserve_s` seconds may run on now, or None: it waits."""
    if earned >= reserve_s:
        return EARNED
    if newcomer_load_s + reserve_s <= budget.newcomer_seconds_per_hour:
        return NEWCOMERS
    return None
