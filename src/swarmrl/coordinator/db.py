"""Tables of the coordinator and the versioned, idempotent migration run at start-up.

Times are stored as float seconds since the epoch (the service's injectable clock), so the same code runs on
SQLite and Postgres without timezone handling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Engine,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from swarmrl.coordinator.errors import SchemaVersionError

KEY = String(64)
SHA = String(64)
RUN_ID = String(128)


class Base(DeclarativeBase):
    pass


class SchemaVersion(Base):
    __tablename__ = "schema_version"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class Run(Base):
    __tablename__ = "runs"
    run_id: Mapped[str] = mapped_column(RUN_ID, primary_key=True)
    trainer_public_key: Mapped[str] = mapped_column(KEY)
    async_level: Mapped[int] = mapped_column(Integer)
    current_step: Mapped[int] = mapped_column(Integer, default=0)
    run_secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)


class Validator(Base):
    __tablename__ = "validators"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"), primary_key=True)
    public_key: Mapped[str] = mapped_column(KEY, primary_key=True)
    added_at: Mapped[float] = mapped_column(Float)


class Node(Base):
    __tablename__ = "nodes"
    node_id: Mapped[str] = mapped_column(KEY, primary_key=True)
    hardware: Mapped[dict] = mapped_column(JSON, default=dict)
    registered_at: Mapped[float] = mapped_column(Float)
    hard_rejects: Mapped[int] = mapped_column(Integer, default=0)


class Membership(Base):
    """A node in a run; `last_seen` is its latest heartbeat (the heartbeat record)."""

    __tablename__ = "memberships"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.node_id"), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))  # active | left | ejected
    joined_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    heartbeats: Mapped[int] = mapped_column(BigInteger, default=0)
    policy_step: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Nonce(Base):
    __tablename__ = "nonces"
    node_id: Mapped[str] = mapped_column(KEY, primary_key=True)
    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    seen_at: Mapped[float] = mapped_column(Float, index=True)


class Step(Base):
    __tablename__ = "steps"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    manifest_sha256: Mapped[str | None] = mapped_column(SHA, nullable=True)
    manifest_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    published_at: Mapped[float] = mapped_column(Float)


class UploadSlot(Base):
    __tablename__ = "upload_slots"
    slot_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"))
    node_id: Mapped[str] = mapped_column(KEY, index=True)
    step: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(SHA)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    expires_at: Mapped[float] = mapped_column(Float)
    uploaded: Mapped[bool] = mapped_column(Boolean, default=False)
    storage_key: Mapped[str | None] = mapped_column(Text, nullable=True)


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (UniqueConstraint("run_id", "sha256", name="uq_submission_run_sha"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"), index=True)
    node_id: Mapped[str] = mapped_column(KEY, index=True)
    step: Mapped[int] = mapped_column(Integer, index=True)
    sha256: Mapped[str] = mapped_column(SHA)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    rows: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(BigInteger)
    storage_key: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), index=True)  # pending | accepted | rejected
    submitted_at: Mapped[float] = mapped_column(Float)


class Verdict(Base):
    __tablename__ = "verdicts"
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), primary_key=True)
    validator_key: Mapped[str] = mapped_column(KEY)
    accepted: Mapped[bool] = mapped_column(Boolean)
    check_name: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text)
    severity: Mapped[str | None] = mapped_column(String(8), nullable=True)
    rewards_summary: Mapped[dict] = mapped_column(JSON, default=dict)
    decided_at: Mapped[float] = mapped_column(Float)


class LedgerEntry(Base):
    __tablename__ = "ledger"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"), index=True)
    node_id: Mapped[str] = mapped_column(KEY, index=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), unique=True)
    tokens: Mapped[int] = mapped_column(BigInteger)
    samples: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), index=True)  # pending | unlocked | wiped
    credited_at: Mapped[float] = mapped_column(Float)
    unlock_at: Mapped[float] = mapped_column(Float)
    settled_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Ban(Base):
    __tablename__ = "bans"
    node_id: Mapped[str] = mapped_column(KEY, primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    banned_at: Mapped[float] = mapped_column(Float)


def _create_v1(engine: Engine) -> None:
    Base.metadata.create_all(engine)


# version → upgrade from version-1. A new column or table is a new entry here, never an edit of an old one.
MIGRATIONS: dict[int, Callable[[Engine], None]] = {1: _create_v1}
SCHEMA_VERSION = max(MIGRATIONS)


def current_version(engine: Engine) -> int:
    SchemaVersion.__table__.create(engine, checkfirst=True)
    with Session(engine) as session:
        row = session.scalar(select(SchemaVersion).where(SchemaVersion.id == 1))
        return 0 if row is None else row.version


def migrate(engine: Engine) -> int:
    """Bring the database to SCHEMA_VERSION; running it again is a no-op. Returns the version."""
    version = current_version(engine)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(f"database schema is v{version}; this swarmrl knows up to v{SCHEMA_VERSION}")
    for target in range(version + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[target](engine)
        with Session(engine) as session, session.begin():
            row = session.get(SchemaVersion, 1)
            if row is None:
                session.add(SchemaVersion(id=1, version=target))
            else:
                row.version = target
    return SCHEMA_VERSION


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers run beside the single writer; busy_timeout queues writers instead of failing them.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(db_url: str) -> Engine:
    if db_url.startswith("sqlite"):
        engine = create_engine(db_url, connect_args={"check_same_thread": False, "timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(db_url, pool_pre_ping=True, pool_size=8, max_overflow=8)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
