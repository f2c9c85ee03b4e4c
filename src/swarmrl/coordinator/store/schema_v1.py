"""The coordinator's tables as schema version 1 created them, frozen.

Migration 1 builds exactly this; later versions alter it (`db.MIGRATIONS`). The ORM models in `db.py` describe
the newest schema, so they cannot stand in for an old one: a database written by an older swarmrl has these
tables, and each upgrade starts from them.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

KEY = String(64)
SHA = String(64)
RUN_ID = String(128)

metadata = MetaData()

Table(
    "runs",
    metadata,
    Column("run_id", RUN_ID, primary_key=True),
    Column("trainer_public_key", KEY, nullable=False),
    Column("async_level", Integer, nullable=False),
    Column("current_step", Integer, nullable=False),
    Column("run_secret", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
)
Table(
    "validators",
    metadata,
    Column("run_id", ForeignKey("runs.run_id"), primary_key=True),
    Column("public_key", KEY, primary_key=True),
    Column("added_at", Float, nullable=False),
)
Table(
    "nodes",
    metadata,
    Column("node_id", KEY, primary_key=True),
    Column("hardware", JSON, nullable=False),
    Column("registered_at", Float, nullable=False),
    Column("hard_rejects", Integer, nullable=False),
)
Table(
    "memberships",
    metadata,
    Column("run_id", ForeignKey("runs.run_id"), primary_key=True),
    Column("node_id", ForeignKey("nodes.node_id"), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("joined_at", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
    Column("heartbeats", BigInteger, nullable=False),
    Column("policy_step", Integer, nullable=True),
)
Table(
    "nonces",
    metadata,
    Column("node_id", KEY, primary_key=True),
    Column("nonce", String(64), primary_key=True),
    Column("seen_at", Float, nullable=False),
    Index("ix_nonces_seen_at", "seen_at"),
)
Table(
    "steps",
    metadata,
    Column("run_id", ForeignKey("runs.run_id"), primary_key=True),
    Column("step", Integer, primary_key=True),
    Column("manifest_sha256", SHA, nullable=True),
    Column("manifest_url", Text, nullable=True),
    Column("published_at", Float, nullable=False),
)
Table(
    "upload_slots",
    metadata,
    Column("slot_id", String(32), primary_key=True),
    Column("run_id", ForeignKey("runs.run_id"), nullable=False),
    Column("node_id", KEY, nullable=False),
    Column("step", Integer, nullable=False),
    Column("sha256", SHA, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("uploaded", Boolean, nullable=False),
    Column("storage_key", Text, nullable=True),
    Index("ix_upload_slots_created_at", "created_at"),
    Index("ix_upload_slots_node_id", "node_id"),
)
Table(
    "submissions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", ForeignKey("runs.run_id"), nullable=False),
    Column("node_id", KEY, nullable=False),
    Column("step", Integer, nullable=False),
    Column("sha256", SHA, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("tokens", BigInteger, nullable=False),
    Column("storage_key", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("submitted_at", Float, nullable=False),
    UniqueConstraint("run_id", "sha256", name="uq_submission_run_sha"),
    Index("ix_submissions_run_id", "run_id"),
    Index("ix_submissions_node_id", "node_id"),
    Index("ix_submissions_step", "step"),
    Index("ix_submissions_status", "status"),
)
Table(
    "verdicts",
    metadata,
    Column("submission_id", ForeignKey("submissions.id"), primary_key=True),
    Column("validator_key", KEY, nullable=False),
    Column("accepted", Boolean, nullable=False),
    Column("check_name", String(64), nullable=False),
    Column("reason", Text, nullable=False),
    Column("severity", String(8), nullable=True),
    Column("rewards_summary", JSON, nullable=False),
    Column("decided_at", Float, nullable=False),
)
Table(
    "ledger",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", ForeignKey("runs.run_id"), nullable=False),
    Column("node_id", KEY, nullable=False),
    Column("submission_id", ForeignKey("submissions.id"), nullable=False, unique=True),
    Column("tokens", BigInteger, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("credited_at", Float, nullable=False),
    Column("unlock_at", Float, nullable=False),
    Column("settled_at", Float, nullable=True),
    Index("ix_ledger_run_id", "run_id"),
    Index("ix_ledger_node_id", "node_id"),
    Index("ix_ledger_status", "status"),
)
Table(
    "bans",
    metadata,
    Column("node_id", KEY, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("banned_at", Float, nullable=False),
)
