import pytest
from sqlalchemy import inspect, update
from sqlalchemy.orm import Session

from swarmrl.coordinator.errors import SchemaVersionError
from swarmrl.coordinator.store.db import SCHEMA_VERSION, SchemaVersion, current_version, make_engine, migrate

TABLES = {
    "schema_version",
    "runs",
    "validators",
    "nodes",
    "memberships",
    "nonces",
    "steps",
    "upload_slots",
    "submissions",
    "verdicts",
    "ledger",
    "bans",
    "work_units",
}


def test_migrate_creates_every_table_and_records_the_version(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    assert current_version(engine) == 0
    assert migrate(engine) == SCHEMA_VERSION
    assert TABLES <= set(inspect(engine).get_table_names())
    assert current_version(engine) == SCHEMA_VERSION


def test_migrate_is_idempotent(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    migrate(engine)
    migrate(engine)
    with Session(engine) as session:
        assert session.query(SchemaVersion).count() == 1


def test_a_newer_database_is_refused(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    migrate(engine)
    with Session(engine) as session, session.begin():
        session.execute(update(SchemaVersion).values(version=SCHEMA_VERSION + 1))
    with pytest.raises(SchemaVersionError, match="newer|knows up to"):
        migrate(engine)
