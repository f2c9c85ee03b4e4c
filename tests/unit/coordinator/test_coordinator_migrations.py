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


def _schema(engine) -> dict:
    """What a database holds, as the inspector reads it: every table's columns (in any order: an upgrade cut
    off and run again adds them in another), keys and indexes."""
    found = inspect(engine)
    return {
        table: (
            sorted(
                (c["name"], str(c["type"]), c["nullable"], str(c["default"]))
                for c in found.get_columns(table)
            ),
            found.get_pk_constraint(table)["constrained_columns"],
            sorted(
                (f["constrained_columns"], f["referred_table"], f["referred_columns"])
                for f in found.get_foreign_keys(table)
            ),
            sorted(
                (
                    i["name"],
                    i["column_names"],
                    bool(i["unique"]),
                    str(i.get("dialect_options", {}).get("sqlite_where")),
                )
                for i in found.get_indexes(table)
            ),
            sorted((u["name"], u["column_names"]) for u in found.get_unique_constraints(table)),
        )
        for table in found.get_table_names()
    }


@pytest.fixture(scope="module")
def fresh_schema(tmp_path_factory) -> dict:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('fresh') / 'fresh.db'}")
    migrate(engine)
    return _schema(engine)


@pytest.mark.parametrize("older", range(1, SCHEMA_VERSION))
def test_a_database_at_any_older_version_upgrades_to_the_schema_of_a_new_one(tmp_path, older, fresh_schema):
    upgraded = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    assert migrate(upgraded, to=older) == older == current_version(upgraded)
    assert _schema(upgraded) != fresh_schema
    assert migrate(upgraded) == SCHEMA_VERSION
    assert _schema(upgraded) == fresh_schema


def test_an_upgrade_cut_off_after_some_of_its_changes_runs_again_to_the_end(tmp_path, fresh_schema):
    # SQLite commits each ALTER TABLE at once: a coordinator killed inside v2 leaves some of its columns and
    # no record of v2. The next start runs v2 again over them.
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    migrate(engine, to=1)
    with engine.begin() as connection:
        connection.exec_driver_sql("ALTER TABLE runs ADD COLUMN step_units INTEGER")
    assert current_version(engine) == 1
    assert migrate(engine) == SCHEMA_VERSION
    assert _schema(engine) == fresh_schema
