"""Pack rows → wire models (`pack_api`)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from swarmrl.coordinator.pack_api import PackCredits, PackDetail, PackInfo
from swarmrl.coordinator.rules.pack_credit import credits_by_pack
from swarmrl.coordinator.store.pack_tables import TaskPackRecord
from swarmrl.tasks.packs.report import AdmissionReport

_FIELDS = (
    "id run_id digest author label rows status lane submitted_at decided_at retired_at refused_by reason "
    "admission_seconds completions failed disagreements groups_seen groups_kept rows_trained"
).split()


def pack_infos(session: Session, packs: list[TaskPackRecord]) -> list[PackInfo]:
    credits = credits_by_pack(session, [pack.id for pack in packs])
    return [_info(pack, credits[pack.id]) for pack in packs]


def _info(pack: TaskPackRecord, credit: dict[str, int]) -> PackInfo:
    checks = {check["name"]: check["status"] for check in (pack.report or {}).get("checks", [])}
    return PackInfo(
        **{name: getattr(pack, name) for name in _FIELDS},
        checks=checks,
        credit=PackCredits(
            pending_rows=credit["pending"], unlocked_rows=credit["unlocked"], wiped_rows=credit["wiped"]
        ),
    )


def pack_detail(session: Session, pack: TaskPackRecord) -> PackDetail:
    info = pack_infos(session, [pack])[0]
    report = AdmissionReport.model_validate(pack.report) if pack.report is not None else None
    return PackDetail(**info.model_dump(), report=report)
