"""The coordinator's tables of community task packs (created by migration v6, `db.MIGRATIONS`).

pack_policies      a run's [tasks.community] as its operator set it (no row: the run takes no packs)
task_packs         each submitted pack: its archive, where admission stands, what the run measured of it
pack_mixes         the packs of each step and their shares, fixed the first time the step's mix is read
pack_observations  one trusted judge's scores of the pack completions of one file (validator, trainer)
pack_credits       an author's credit for the rows of its pack trained in informative groups, per file
"""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from swarmrl.coordinator.store.schema_v1 import KEY, RUN_ID, SHA


class PackBase(DeclarativeBase):
    """The pack tables' own metadata: `db.py` creates them (migration v6) and nothing here imports it back, so
    their run and submission ids are plain columns, kept consistent by the rules that write them."""

    __table__: ClassVar[Table]  # a mapped class's table (DeclarativeBase types it as any FromClause)


# pending → checking → probation ⇄ measuring → admitted → retired; refused from checking, probation or measuring
PACK_STATES = ("pending", "checking", "probation", "measuring", "admitted", "refused", "retired")
IN_MIX = ("probation", "measuring", "admitted")  # packs whose rows units may hold
WAITING = ("pending", "checking", "probation", "measuring")  # not decided yet: count against pending caps


class PackPolicy(PackBase):
    __tablename__ = "pack_policies"
    run_id: Mapped[str] = mapped_column(RUN_ID, primary_key=True)
    policy: Mapped[dict] = mapped_column(JSON)  # CommunityTasksConfig, as JSON
    set_at: Mapped[float] = mapped_column(Float)


class TaskPackRecord(PackBase):
    __tablename__ = "task_packs"
    __table_args__ = (
        UniqueConstraint("run_id", "digest", name="uq_task_packs_run_digest"),
        Index("ix_task_packs_run_status", "run_id", "status"),
        Index("ix_task_packs_run_author", "run_id", "author"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(RUN_ID)
    digest: Mapped[str] = mapped_column(SHA)  # the signed content digest
    author: Mapped[str] = mapped_column(KEY)
    label: Mapped[str] = mapped_column(String(80))  # name@version
    rows: Mapped[int] = mapped_column(Integer)
    pass_score: Mapped[float] = mapped_column(Float)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    storage_key: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    lane: Mapped[str | None] = mapped_column(String(16), nullable=True)  # earned | newcomers, once leased
    submitted_at: Mapped[float] = mapped_column(Float)
    decided_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # admitted or refused
    retired_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    checker_key: Mapped[str | None] = mapped_column(KEY, nullable=True)  # the validator holding its lease
    check_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    reserved_seconds: Mapped[float] = mapped_column(Float, default=0.0)  # held by a check in flight
    admission_seconds: Mapped[float] = mapped_column(Float, default=0.0)  # validator-measured, charged
    charged_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    report: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # the validators' AdmissionReport
    refused_by: Mapped[str | None] = mapped_column(String(16), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # why refused or retired, one line
    # retired because its verifier failed or disagreed between judges: its author's unpaid credit is forfeit
    retired_for_cause: Mapped[bool] = mapped_column(Boolean, default=False)
    # What the run measured of it (trusted judges' observations):
    completions: Mapped[int] = mapped_column(BigInteger, default=0)  # judged by a validator
    failed: Mapped[int] = mapped_column(BigInteger, default=0)  # of those, the verifier failed on
    disagreements: Mapped[int] = mapped_column(Integer, default=0)  # files validator and trainer scored apart
    groups_seen: Mapped[int] = mapped_column(BigInteger, default=0)  # offered to the trainer's online filter
    groups_kept: Mapped[int] = mapped_column(BigInteger, default=0)  # of those, informative: trained on
    rows_trained: Mapped[int] = mapped_column(BigInteger, default=0)


class PackMixRecord(PackBase):
    __tablename__ = "pack_mixes"
    run_id: Mapped[str] = mapped_column(RUN_ID, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    entries: Mapped[list] = mapped_column(JSON)  # [PackShare as a dict, ...]
    fixed_at: Mapped[float] = mapped_column(Float)


class PackObservation(PackBase):
    __tablename__ = "pack_observations"
    __table_args__ = (
        UniqueConstraint("pack_id", "submission_id", "judge", name="uq_pack_observations_file_judge"),
        Index("ix_pack_observations_pack", "pack_id", "judge", "id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pack_id: Mapped[int] = mapped_column(ForeignKey("task_packs.id"))
    submission_id: Mapped[int] = mapped_column(Integer)
    judge: Mapped[str] = mapped_column(String(16))  # validator | trainer
    judge_key: Mapped[str] = mapped_column(KEY)
    step: Mapped[int] = mapped_column(Integer)
    scores: Mapped[list] = mapped_column(JSON)  # [[pack row, [score or null (failed), ...]], ...]
    groups: Mapped[int | None] = mapped_column(Integer, nullable=True)  # trainer: offered to the filter
    kept: Mapped[int | None] = mapped_column(Integer, nullable=True)  # trainer: of those, informative
    observed_at: Mapped[float] = mapped_column(Float)


class PackCredit(PackBase):
    __tablename__ = "pack_credits"
    __table_args__ = (
        UniqueConstraint("pack_id", "submission_id", name="uq_pack_credits_file"),
        Index("ix_pack_credits_run_author", "run_id", "author"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(RUN_ID)
    pack_id: Mapped[int] = mapped_column(ForeignKey("task_packs.id"))
    author: Mapped[str] = mapped_column(KEY)
    submission_id: Mapped[int] = mapped_column(Integer)
    rows: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # pending | unlocked | wiped, as the ledger's
    credited_at: Mapped[float] = mapped_column(Float)
    unlock_at: Mapped[float] = mapped_column(Float)
    settled_at: Mapped[float | None] = mapped_column(Float, nullable=True)


PACK_TABLES = (PackPolicy, TaskPackRecord, PackMixRecord, PackObservation, PackCredit)
