"""The rank of members in bounded views: tiers of what cannot be minted for free, never the node id."""

from __future__ import annotations

import pytest

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.server.ranking import ranked_members, ranked_relays
from swarmrl.coordinator.store.db import (
    Ban,
    Membership,
    Node,
    RelayState,
    Run,
    Validator,
    make_engine,
    make_sessionmaker,
    migrate,
)

NOW = 1000.0
CONFIG = CoordinatorConfig(operator_relays=["e" * 64])


def key(c: str) -> str:
    return c * 64


@pytest.fixture
def session(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    migrate(engine)
    with make_sessionmaker(engine)() as session:
        session.add(
            Run(run_id="r", trainer_public_key=key("f"), async_level=1, run_secret="s", created_at=0.0)
        )
        session.add(Validator(run_id="r", public_key=key("d"), added_at=0.0))
        members = {  # id: (accepted files, last heard, joined, role)
            key("0"): (0, NOW, 5.0, "worker"),  # a ground key: the smallest id, alive, never proven
            key("1"): (0, 0.0, 1.0, "worker"),  # never proven and silent
            key("2"): (0, NOW, 9.0, "worker"),  # banned below
            key("3"): (4, 0.0, 2.0, "worker"),  # proven, gone quiet
            key("9"): (2, NOW, 3.0, "worker"),  # proven and alive
            key("a"): (7, NOW, 4.0, "worker"),  # more accepted work
            key("d"): (0, NOW, 8.0, "worker"),  # the run's validator
            key("e"): (0, NOW, 7.0, "relay"),  # the operator's relay
            key("c"): (0, NOW, 6.0, "relay"),  # a relay nobody named
        }
        session.add_all(Node(node_id=n, hardware={}, registered_at=0.0, hard_rejects=0) for n in members)
        session.flush()
        for node_id, (accepted, heard, joined, role) in members.items():
            session.add(
                Membership(
                    run_id="r",
                    node_id=node_id,
                    status="active",
                    joined_at=joined,
                    last_seen=heard,
                    heartbeats=1,
                    role=role,
                    judged_accepted=accepted,
                )
            )
            session.add(RelayState(run_id="r", node_id=node_id, report={}, reported_at=NOW))
        session.add(Ban(node_id=key("2"), reason="forged", banned_at=NOW))
        session.commit()
        yield session


def test_members_rank_by_standing_and_the_view_counts_what_it_left_out(session):
    run = session.get(Run, "r")
    page = ranked_members(session, run, CONFIG, NOW, limit=5)
    assert [m.node_id[0] for m in page.members] == ["e", "d", "a", "9", "2"]
    assert page.left_out == {"quiet proven": 1, "never-proven": 2, "idle never-proven": 1}
    everything = ranked_members(session, run, CONFIG, NOW, limit=100)
    assert [m.node_id[0] for m in everything.members] == ["e", "d", "a", "9", "2", "3", "0", "c", "1"]
    assert everything.left_out == {}


def test_relays_rank_the_operators_first(session):
    run = session.get(Run, "r")
    page = ranked_relays(session, run, CONFIG, NOW, limit=1)
    assert [m.node_id[0] for m in page.members] == ["e"]
    assert page.left_out == {"never-proven": 1}
