"""A database written by schema v1 (before leases) upgrades in place, on SQLite and on a real Postgres server,
and keeps every accepted submission, verdict and credit."""

import pytest
from sqlalchemy import insert, inspect, select
from sqlalchemy.orm import Session

from swarmrl.coordinator.rules import ledger
from swarmrl.coordinator.store import schema_v1
from swarmrl.coordinator.store.db import (
    SCHEMA_VERSION,
    Membership,
    Run,
    Submission,
    UploadSlot,
    Verdict,
    current_version,
    make_engine,
    migrate,
)
from swarmrl_lab.coordinator_double import POSTGRES_SKIP_REASON, postgres_available, postgres_server

NODE, TRAINER, VALIDATOR = "aa" * 32, "bb" * 32, "cc" * 32


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'v1.db'}"
        return
    if not postgres_available():
        pytest.skip(POSTGRES_SKIP_REASON)
    with postgres_server() as url:
        yield url


def _write_v1(engine) -> None:
    assert current_version(engine) == 0  # creates the version table, as v1 did
    assert migrate(engine, to=1) == 1
    tables = schema_v1.metadata.tables
    with engine.begin() as db:
        db.execute(
            insert(tables["runs"]).values(
                run_id="r",
                trainer_public_key=TRAINER,
                async_level=2,
                current_step=3,
                run_secret="s",
                created_at=1.0,
            )
        )
        db.execute(
            insert(tables["nodes"]).values(node_id=NODE, hardware={}, registered_at=1.0, hard_rejects=0)
        )
        db.execute(
            insert(tables["memberships"]).values(
                run_id="r", node_id=NODE, status="active", joined_at=1.0, last_seen=2.0, heartbeats=5
            )
        )
        for i, status in enumerate(["accepted", "pending"], start=1):
            db.execute(
                insert(tables["submissions"]).values(
                    id=i,
                    run_id="r",
                    node_id=NODE,
                    step=3,
                    sha256=f"{i:064x}",
                    size_bytes=10,
                    rows=4,
                    tokens=40 * i,
                    storage_key=f"runs/r/step_3/{NODE}/{i:064x}.parquet",
                    status=status,
                    submitted_at=2.0,
                )
            )
        db.execute(
            insert(tables["verdicts"]).values(
                submission_id=1,
                validator_key=VALIDATOR,
                accepted=True,
                check_name="all",
                reason="",
                rewards_summary={"mean": 0.5},
                decided_at=3.0,
            )
        )
        db.execute(
            insert(tables["ledger"]).values(
                run_id="r",
                node_id=NODE,
                submission_id=1,
                tokens=40,
                samples=4,
                status="pending",
                credited_at=3.0,
                unlock_at=100.0,
            )
        )
        db.execute(
            insert(tables["upload_slots"]).values(
                slot_id="0" * 32,
                run_id="r",
                node_id=NODE,
                step=3,
                sha256="ee" * 32,
                size_bytes=10,
                created_at=2.0,
                expires_at=900.0,
                uploaded=False,
            )
        )


def test_a_v1_database_upgrades_in_place_and_keeps_its_work(db_url):
    engine = make_engine(db_url)
    try:
        _write_v1(engine)
        assert current_version(engine) == 1
        assert migrate(engine) == SCHEMA_VERSION == 6
        assert migrate(engine) == 6  # again: a no-op
        tables = set(inspect(engine).get_table_names())
        assert {"trainer_metrics", "relay_reports"} <= tables
        assert {
            "pack_policies",
            "task_packs",
            "pack_mixes",
            "pack_observations",
            "pack_credits",
        } <= tables  # v6
        with Session(engine) as session:
            run = session.get(Run, "r")
            assert (run.status, run.step_units, run.current_step) == ("open", None, 3)
            assert (run.unit_rows, run.unit_max_tokens, run.contract) == (None, None, None)
            member = session.get(Membership, ("r", NODE))
            assert (member.role, member.judged_accepted) == ("worker", 1)  # its accepted file counts
            submissions = list(session.scalars(select(Submission).order_by(Submission.id)))
            assert [(s.status, s.tokens, s.checked, s.use_outcome) for s in submissions] == [
                ("accepted", 40, True, None),
                ("pending", 80, True, None),
            ]
            assert session.get(Verdict, 1).rewards_summary == {"mean": 0.5}
            (balance,) = ledger.balances(session, "r")
            assert (balance.node_id, balance.pending_tokens) == (NODE, 40)
            slot = session.get(UploadSlot, "0" * 32)
            assert (slot.submitted, slot.batch_index, slot.purged_at) == (False, None, None)
    finally:
        engine.dispose()
