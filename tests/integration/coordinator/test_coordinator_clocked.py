"""Time-driven behaviour over real HTTP with an injected clock: liveness, credit unlock, slot expiry."""

import pytest
from sqlalchemy import func, select

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.client import AdminClient, NodeClient, ValidatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.server.app import create_app
from swarmrl.coordinator.store.db import Nonce
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import FakeClock, accept, leased_submit, serve_in_thread

CONFIG = CoordinatorConfig(
    heartbeat_interval_s=10.0,
    heartbeat_grace_s=0.0,
    dead_after_missed=3,
    credit_unlock_window_s=600.0,
    upload_slot_ttl_s=60.0,
    uploads_per_hour=2,
    clock_skew_s=30.0,
    standing_max_drop_fraction=1.0,  # units lapse here on purpose; standing: test_coordinator_leases, adversarial
)


@pytest.fixture
def world(tmp_path):
    clock = FakeClock()
    app = create_app(
        db_url=f"sqlite:///{tmp_path / 'c.db'}",
        storage=tmp_path / "store",
        admin_token="t",
        config=CONFIG,
        clock=clock,
    )
    server = serve_in_thread(app)
    try:

        def client(role, identity=None, **kw):
            return role.at(server.url, identity, clock=clock, retry=NO_RETRY, **kw)

        admin = client(AdminClient, admin_token="t")
        trainer = Identity.generate()
        validator = client(ValidatorClient, Identity.generate())
        worker = client(NodeClient, Identity.generate())
        admin.create_run("r", trainer.node_id, ContractSection(), bound_claims=False)
        admin.add_validator("r", validator.node_id)
        worker.register()
        worker.join("r", ContractSection())
        yield clock, admin, validator, worker, app
    finally:
        server.stop()
        app.state.engine.dispose()


def _health(admin, node_id):
    return {m.node_id: m.health for m in admin.reads.nodes("r")}[node_id]


def test_missed_heartbeats_make_a_node_unhealthy_then_dead_and_ejected(world):
    clock, admin, _, worker, _app = world
    assert _health(admin, worker.node_id) == "healthy"
    clock.advance(10.0)
    assert _health(admin, worker.node_id) == "unhealthy"
    worker.heartbeat("r")
    assert _health(admin, worker.node_id) == "healthy"
    clock.advance(29.9)
    assert _health(admin, worker.node_id) == "unhealthy"
    clock.advance(0.1)
    assert _health(admin, worker.node_id) == "dead"
    with pytest.raises(CoordinatorError) as info:
        worker.heartbeat("r")
    assert (info.value.status, info.value.kind) == (409, "ejected")
    assert admin.reads.nodes("r", health="dead")[0].status == "ejected"
    worker.join("r", ContractSection())
    assert _health(admin, worker.node_id) == "healthy"


def test_credit_unlocks_after_the_window(world):
    clock, admin, validator, worker, _app = world
    submission = leased_submit(worker, "r", b"rows", rows=3, tokens=33)
    accept(validator, submission)
    clock.advance(599.0)
    (balance,) = admin.reads.ledger("r").balances
    assert (balance.pending_tokens, balance.unlocked_tokens) == (33, 0)
    clock.advance(1.0)
    (balance,) = admin.reads.ledger("r").balances
    assert (balance.pending_tokens, balance.unlocked_tokens, balance.unlocked_samples) == (0, 33, 3)


def test_unlocked_credit_survives_a_later_hard_reject(world):
    clock, admin, validator, worker, _app = world
    old = leased_submit(worker, "r", b"old", rows=1, tokens=10)
    accept(validator, old)
    clock.advance(3600.0)  # past the unlock window and the hourly upload limit
    worker.join("r", ContractSection())  # the node went silent meanwhile; join again
    fresh = leased_submit(worker, "r", b"fresh", rows=1, tokens=5)
    accept(validator, fresh)
    bad = leased_submit(worker, "r", b"bad", rows=1, tokens=7)
    validator.post_verdict(bad.id, accept=False, check="toploc")
    (balance,) = admin.reads.ledger("r").balances
    assert (balance.unlocked_tokens, balance.wiped_tokens, balance.pending_tokens) == (10, 5, 0)


def test_upload_slots_expire_and_the_hourly_limit_rolls(world):
    clock, _, _, worker, _app = world
    unit = worker.lease_work("r", max_units=1).units[0]
    slot = worker.request_upload("r", 0, unit.batch_index, "00" * 32, 1)
    worker.request_upload("r", 0, unit.batch_index, "11" * 32, 1)
    with pytest.raises(CoordinatorError, match="upload_rate_limited"):
        worker.request_upload("r", 0, unit.batch_index, "22" * 32, 1)
    for _ in range(7):  # 63 s of a live node: the slot (60 s, less for a 1-byte file) lapses
        clock.advance(9.0)
        worker.heartbeat("r")
    with pytest.raises(CoordinatorError, match="slot_expired"):
        worker.upload(slot, b"\x00")
    clock.advance(3600.0)
    worker.join("r", ContractSection())
    unit = worker.lease_work("r", max_units=1).units[0]  # the old unit lapsed with its node's silence
    worker.request_upload("r", 0, unit.batch_index, "22" * 32, 1)


def test_client_and_server_clocks_must_agree(world):
    clock, _, _, worker, _app = world
    skewed = NodeClient.at(
        worker.transport.base_url, worker.transport.identity, clock=lambda: clock() - 31.0, retry=NO_RETRY
    )
    with pytest.raises(CoordinatorError) as info:
        skewed.heartbeat("r")
    assert (info.value.status, info.value.kind) == (401, "expired")


def test_nonces_are_forgotten_once_their_timestamps_would_expire(world):
    clock, _, _, worker, app = world

    def nonces():
        with app.state.engine.connect() as connection:
            return connection.execute(select(func.count()).select_from(Nonce)).scalar_one()

    assert nonces() == 2  # register and join, at t = 0
    for _ in range(8):  # heartbeats at t = 9, 18, ..., 72; the purge runs at most once a minute
        clock.advance(9.0)
        worker.heartbeat("r")
    # The purge at t = 63 dropped nonces older than 2 x clock_skew_s = 60 s (the two from t = 0).
    assert nonces() == 8
