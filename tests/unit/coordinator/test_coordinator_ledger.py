import pytest
from sqlalchemy.orm import Session

from swarmrl.coordinator.api import LedgerBalance
from swarmrl.coordinator.rules import ledger
from swarmrl.coordinator.store.db import Run, Submission, make_engine, migrate

A, B = "aa" * 32, "bb" * 32


@pytest.fixture
def session(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'l.db'}")
    migrate(engine)
    with Session(engine) as s:
        s.add(
            Run(
                run_id="r",
                trainer_public_key=A,
                async_level=2,
                current_step=0,
                run_secret="k",
                created_at=0.0,
            )
        )
        s.commit()
        yield s
    engine.dispose()


def _submission(session, node, tokens, rows, sha):
    sub = Submission(
        run_id="r",
        node_id=node,
        step=0,
        sha256=sha,
        size_bytes=1,
        rows=rows,
        tokens=tokens,
        storage_key="k",
        status="accepted",
        submitted_at=0.0,
    )
    session.add(sub)
    session.flush()
    return sub


def _credit(session, node, tokens, rows, sha, *, now, window_s):
    """Credit what a judge measured in a file whose node claimed absurd figures: the claim plays no part."""
    claimed = _submission(session, node, 2**53, 2**31 - 1, sha)
    return ledger.credit(session, claimed, rows, tokens, now=now, window_s=window_s)


def test_credit_is_pending_until_the_window_then_unlocks(session):
    _credit(session, A, 100, 4, "1" * 64, now=10.0, window_s=50.0)
    assert ledger.settle(session, "r", now=59.9) == 0
    assert ledger.settle(session, "r", now=60.0) == 1
    (entry,) = ledger.entries_of(session, "r", A, limit=10)
    assert (entry.status, entry.settled_at) == ("unlocked", 60.0)


def test_wipe_takes_only_pending_credit_of_that_node(session):
    _credit(session, A, 100, 4, "1" * 64, now=0.0, window_s=10.0)
    ledger.settle(session, "r", now=10.0)
    _credit(session, A, 30, 2, "2" * 64, now=10.0, window_s=10.0)
    _credit(session, B, 7, 1, "3" * 64, now=10.0, window_s=10.0)
    assert ledger.wipe_pending(session, "r", A, now=11.0) == 1
    statuses = {(e.node_id, e.tokens): e.status for e in ledger.entries_of(session, "r", None, limit=10)}
    assert statuses == {(A, 100): "unlocked", (A, 30): "wiped", (B, 7): "pending"}


def test_balances_sum_by_node_and_status_over_every_entry(session):
    for tokens, samples, node, status in [
        (5, 1, B, "pending"),
        (100, 4, A, "unlocked"),
        (30, 2, A, "wiped"),
        (1, 1, A, "unlocked"),
    ]:
        _credit(session, node, tokens, samples, f"{tokens:064x}", now=0.0, window_s=10.0).status = status
    session.flush()
    assert ledger.balances(session, "r") == [
        LedgerBalance(node_id=A, unlocked_tokens=101, unlocked_samples=5, wiped_tokens=30, wiped_samples=2),
        LedgerBalance(node_id=B, pending_tokens=5, pending_samples=1),
    ]
    assert ledger.balances(session, "r", after_node=A) == [
        LedgerBalance(node_id=B, pending_tokens=5, pending_samples=1)
    ]
    assert [b.node_id for b in ledger.balances(session, "r", limit=1)] == [A]


def test_balances_are_not_cut_by_the_entry_page(session):
    """Totals come from the database over every entry: 510 credits are 510, whatever the list limit."""
    for i in range(510):
        _credit(session, A, 2, 1, f"{i:064x}", now=0.0, window_s=10.0)
    session.flush()
    assert len(ledger.entries_of(session, "r", None, limit=500)) == 500
    (balance,) = ledger.balances(session, "r")
    assert (balance.pending_tokens, balance.pending_samples) == (1020, 510)
