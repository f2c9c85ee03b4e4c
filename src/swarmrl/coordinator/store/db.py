"""Tables of the coordinator and the versioned, idempotent migration run at start-up.

Times are stored as float seconds since the epoch (the service's injectable clock), so the same code runs on
SQLite and Postgres without timezone handling.

Migrations: every schema change is written with Alembic's operations (`op.add_column`, `op.create_table`,
`op.create_index`, `op.execute` of a Core statement) over a MigrationContext on the service's own connection,
so Alembic renders the DDL for SQLite and Postgres alike and no SQL is assembled from strings. Which ones to
run stays ours: an ordered `MIGRATIONS` list and the `schema_version` row, not Alembic's script directory,
env.py and `alembic_version` table, because
- the coordinator migrates itself in-process before its first request (`create_app`), from an installed
  package, with no alembic.ini or migration scripts on the node's disk and no second command to run;
- every database already written records its version in `schema_version`: it upgrades from there as before;
- each step is idempotent (it adds only the columns, tables and indexes the database lacks), so an upgrade
  cut off on SQLite, whose ALTER TABLE commits at once, runs again to the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from alembic.operations import Operations
from alembic.operations.ops import CreateIndexOp, CreateTableOp
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    DefaultClause,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    column,
    create_engine,
    event,
    false,
    func,
    inspect,
    select,
    table,
    text,
    true,
    update,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from swarmrl.coordinator.errors import SchemaVersionError
from swarmrl.coordinator.store import schema_v1
from swarmrl.coordinator.store.pack_tables import PACK_TABLES, PackBase

KEY = String(64)
SHA = String(64)
RUN_ID = String(128)


class Base(DeclarativeBase):
    __table__: ClassVar[Table]  # a mapped class's table (DeclarativeBase types it as any FromClause)


class SchemaVersion(Base):
    __tablename__ = "schema_version"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class Run(Base):
    __tablename__ = "runs"
    run_id: Mapped[str] = mapped_column(RUN_ID, primary_key=True)
    trainer_public_key: Mapped[str] = mapped_column(KEY)
    async_level: Mapped[int] = mapped_column(
        Integer
    )  # the contract's, kept as a column for the SQL of leases
    current_step: Mapped[int] = mapped_column(Integer, default=0)
    run_secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
    # open: work is leased · draining: no new leases, what was submitted is still judged (v2)
    status: Mapped[str] = mapped_column(String(16), default="open", server_default="open")
    # Work units the trainer wants for the open step; None: the coordinator's default (v2).
    step_units: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The bounds of one unit's file, as the run's contract fixes them (v4): its exact number of rows and the
    # most completion tokens one row may hold. None: a run created without them (claims are then unbounded).
    unit_rows: Mapped[int | None] = mapped_column(Integer, nullable=True)
    unit_max_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The run config's [contract] the run was created with (v5), which every role's must equal at join; it
    # sets async_level and the unit bounds above. None: a run created before contracts were stored (none may
    # join it).
    contract: Mapped[dict | None] = mapped_column(JSON, nullable=True)


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
    # Measured seconds per work unit (moving average over its submissions); sizes its leases (v2).
    unit_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    # worker | relay (v4): only a relay may report relays; a relay leases no work.
    role: Mapped[str] = mapped_column(String(16), default="worker", server_default="worker")
    # Files of this node in the run that a validator judged and accepted (v4): its probation and standing.
    judged_accepted: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


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
    batch_index: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the leased unit (v2)
    submitted: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # v2
    purged_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # orphan bytes deleted (v2)


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
    # pending | accepted | rejected | voided (v2: the node was hard-invalidated before it was paid)
    status: Mapped[str] = mapped_column(String(16), index=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    # v2 ---------------------------------------------------------------------------------------------------
    batch_index: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the leased unit it fills
    checked: Mapped[bool] = mapped_column(
        Boolean, default=True, server_default=true()
    )  # False: spot-check skip
    judge_key: Mapped[str | None] = mapped_column(KEY, nullable=True)  # validator holding its lease
    judge_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    used_step: Mapped[int | None] = mapped_column(Integer, nullable=True)  # training step that read it
    use_outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)  # trained | stale | refused
    used_rows: Mapped[int | None] = mapped_column(Integer, nullable=True)


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


ACTIVE_UNIT_STATES = ("leased", "submitted", "accepted")


class WorkUnit(Base):
    """One lease of one unit of work: (step, batch index) of a run, held by one node until `expires_at`.

    leased → submitted → accepted | rejected | voided, or leased → expired | voided. A unit in an active state
    holds its (step, batch index): the partial unique index makes "never leased to two nodes at once" a
    property of the database, not of the request handler. An expired or rejected unit frees its index, and
    the next lease of that step re-issues it (v2)."""

    __tablename__ = "work_units"
    __table_args__ = (
        Index(
            "uq_work_units_active",
            "run_id",
            "step",
            "batch_index",
            unique=True,
            sqlite_where=text("status IN ('leased', 'submitted', 'accepted')"),
            postgresql_where=text("status IN ('leased', 'submitted', 'accepted')"),
        ),
        Index("ix_work_units_run_status_expiry", "run_id", "status", "expires_at"),
        Index("ix_work_units_run_node", "run_id", "node_id"),
        Index("ix_work_units_run_step", "run_id", "step"),
        Index("ix_work_units_lease", "lease_id"),
        Index("ix_work_units_submission", "submission_id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"))
    step: Mapped[int] = mapped_column(Integer)
    batch_index: Mapped[int] = mapped_column(Integer)
    node_id: Mapped[str] = mapped_column(KEY)
    lease_id: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    leased_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    submission_id: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Ban(Base):
    __tablename__ = "bans"
    node_id: Mapped[str] = mapped_column(KEY, primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    banned_at: Mapped[float] = mapped_column(Float)


class TrainerMetrics(Base):
    """The trainer's scalars per policy step (loss, reward, eval/...), for the dashboard's curves."""

    __tablename__ = "trainer_metrics"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    metrics: Mapped[dict] = mapped_column(JSON, default=dict)
    reported_at: Mapped[float] = mapped_column(Float)


class RelayState(Base):
    """A SHARDCAST relay's last report, sent with its heartbeat."""

    __tablename__ = "relay_reports"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"), primary_key=True)
    node_id: Mapped[str] = mapped_column(KEY, primary_key=True)
    report: Mapped[dict] = mapped_column(JSON, default=dict)
    reported_at: Mapped[float] = mapped_column(Float)


def _create_tables(op: Operations, tables: list[Table]) -> None:
    """op.create_table for each of `tables` the database lacks, then the indexes it lacks (a half-applied
    upgrade re-runs: a table already there gets the indexes it lacks)."""
    have = set(inspect(op.get_bind()).get_table_names())
    for wanted in tables:
        if wanted.name not in have:
            op.invoke(CreateTableOp.from_table(wanted))
        _create_indexes(op, tuple(sorted(wanted.indexes, key=lambda index: str(index.name))))


def _add_columns(op: Operations, table: str, names: list[str]) -> None:
    """op.add_column for each of the ORM's `names` the table lacks (a half-applied upgrade re-runs). A column
    with a server default is NOT NULL, filled with the default in the rows already there."""
    have = {c["name"] for c in inspect(op.get_bind()).get_columns(table)}
    columns = Base.metadata.tables[table].c
    for name in names:
        if name in have:
            continue
        default = columns[name].server_default
        op.add_column(
            table,
            Column(
                name,
                columns[name].type,
                server_default=default.arg if isinstance(default, DefaultClause) else None,  # type: ignore[arg-type]
                nullable=default is None,
            ),
        )


def _create_indexes(op: Operations, indexes: tuple[Index, ...]) -> None:
    """op.create_index (unique and partial ones as declared) for each of `indexes` the database lacks."""
    found = inspect(op.get_bind())
    for index in indexes:
        assert index.table is not None  # declared on a table
        if index.name not in {i["name"] for i in found.get_indexes(index.table.name)}:
            op.invoke(CreateIndexOp.from_index(index))


def _create_v1(op: Operations) -> None:
    """The tables as the first release wrote them (schema_v1.py keeps their definitions as they were)."""
    _create_tables(op, list(schema_v1.metadata.sorted_tables))


def _upgrade_v2(op: Operations) -> None:
    """Work leases, validation leases, spot checks, run draining, training outcomes, orphan upload purge."""
    _add_columns(op, "runs", ["status", "step_units"])
    _add_columns(op, "memberships", ["unit_seconds"])
    _add_columns(op, "upload_slots", ["batch_index", "submitted", "purged_at"])
    _add_columns(
        op,
        "submissions",
        ["batch_index", "checked", "judge_key", "judge_until", "used_step", "use_outcome", "used_rows"],
    )
    _create_tables(op, [WorkUnit.__table__])
    _create_indexes(op, V2_INDEXES)


def _upgrade_v3(op: Operations) -> None:
    """The dashboard's inputs: trainer metrics by step, relay reports."""
    _create_tables(op, [TrainerMetrics.__table__, RelayState.__table__])


def _upgrade_v4(op: Operations) -> None:
    """Credit from measured work: a run's unit bounds; members join as workers or relays."""
    _add_columns(op, "runs", ["unit_rows", "unit_max_tokens"])
    _add_columns(op, "memberships", ["role", "judged_accepted"])
    # What members earned before the count was kept. The tables as this version knew them, not the ORM's:
    # a later version's columns must not enter an old migration.
    memberships = table("memberships", column("run_id"), column("node_id"), column("judged_accepted"))
    submissions = table(
        "submissions", column("run_id"), column("node_id"), column("checked"), column("status")
    )
    earned = (
        select(func.count())
        .select_from(submissions)
        .where(
            submissions.c.run_id == memberships.c.run_id,
            submissions.c.node_id == memberships.c.node_id,
            submissions.c.checked,
            submissions.c.status == "accepted",
        )
        .scalar_subquery()
    )
    op.execute(update(memberships).values(judged_accepted=earned))


def _upgrade_v5(op: Operations) -> None:
    """The run's contract, checked at every join."""
    _add_columns(op, "runs", ["contract"])


def _upgrade_v6(op: Operations) -> None:
    """Community task packs: submissions, admission, each step's mix, what the run measured, author credit."""
    _create_tables(op, [pack.__table__ for pack in PACK_TABLES])


V2_INDEXES = (
    Index("ix_submissions_run_step_status", Submission.run_id, Submission.step, Submission.status),
    Index("ix_upload_slots_expires_at", UploadSlot.expires_at),
)

# version → upgrade from version-1, written with Alembic's operations (op.add_column, op.create_table,
# op.create_index, op.execute). A new column or table is a new entry here, never an edit of an old one.
MIGRATIONS: dict[int, Callable[[Operations], None]] = {
    1: _create_v1,
    2: _upgrade_v2,
    3: _upgrade_v3,
    4: _upgrade_v4,
    5: _upgrade_v5,
    6: _upgrade_v6,
}
SCHEMA_VERSION = max(MIGRATIONS)


def current_version(engine: Engine) -> int:
    SchemaVersion.__table__.create(engine, checkfirst=True)
    with Session(engine) as session:
        row = session.scalar(select(SchemaVersion).where(SchemaVersion.id == 1))
        return 0 if row is None else row.version


def migrate(engine: Engine, to: int = SCHEMA_VERSION) -> int:
    """Bring the database to version `to` (tests stop short of the last); running it again is a no-op.
    Returns the version. Each version's changes and its record commit together (on Postgres, whose DDL is
    transactional, a failed upgrade leaves the version before it whole). An empty database is created whole
    from the tables' definitions and recorded at the last version, as Alembic's own recipe does for a new
    database: the same schema the upgrades reach (tests/unit/coordinator/test_coordinator_migrations.py),
    in a fraction of the time, which every coordinator start on a new database (every test's) pays."""
    version = current_version(engine)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(f"database schema is v{version}; this swarmrl knows up to v{SCHEMA_VERSION}")
    if version == 0 and to == SCHEMA_VERSION and set(inspect(engine).get_table_names()) <= {"schema_version"}:
        with engine.begin() as connection:
            for metadata in (Base.metadata, PackBase.metadata):
                metadata.create_all(connection)
            _record_version(connection, SCHEMA_VERSION)
        return SCHEMA_VERSION
    for target in range(version + 1, to + 1):
        with engine.begin() as connection:
            MIGRATIONS[target](Operations(MigrationContext.configure(connection)))
            _record_version(connection, target)
    return max(version, to)


def _record_version(connection: Connection, version: int) -> None:
    with Session(connection) as session:
        row = session.get(SchemaVersion, 1)
        if row is None:
            session.add(SchemaVersion(id=1, version=version))
        else:
            row.version = version
        session.flush()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers run beside the single writer; busy_timeout queues writers instead of failing them.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


# Starlette runs sync endpoints on anyio's worker threads: 40 unless configured otherwise.
REQUEST_THREADS = 40


def make_engine(db_url: str) -> Engine:
    if db_url.startswith("sqlite"):
        # A pool as large as the server's request threads: a connection past the pool is closed when returned,
        # and opening one again (its pragmas with it) under a burst of requests is the costly part.
        engine = create_engine(
            db_url,
            connect_args={"check_same_thread": False, "timeout": 10},
            pool_size=REQUEST_THREADS,
            max_overflow=8,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # No pre-ping: it costs a round trip on every checkout (two per request). A connection that died with the
    # server fails its request with OperationalError → 503, which the client retries, and SQLAlchemy drops
    # the dead connections from the pool on that error.
    return create_engine(db_url, pool_pre_ping=False, pool_size=8, max_overflow=8)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
