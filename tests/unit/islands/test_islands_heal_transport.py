"""The receiving side of the heal transport against torchft's own serving side: a state arrives whole, and a
refusal or a state over the bound is a DiLoCoStateError, not a load."""

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchft")

from swarmrl.diloco.errors import DiLoCoStateError  # noqa: E402
from swarmrl.islands.heal_transport import WeightsOnlyHTTPTransport  # noqa: E402

TIMEOUT = timedelta(seconds=10)


@pytest.fixture(scope="module")
def peers():
    sender, receiver = WeightsOnlyHTTPTransport(TIMEOUT), WeightsOnlyHTTPTransport(TIMEOUT)
    sender.send_checkpoint([], step=3, state_dict={"w": torch.arange(1000.0), "step": 3}, timeout=TIMEOUT)
    yield sender, receiver
    sender.shutdown()
    receiver.shutdown()


def test_a_peers_state_arrives_whole(peers):
    sender, receiver = peers
    state = receiver.recv_checkpoint(0, sender.metadata(), 3, TIMEOUT)
    assert state["step"] == 3 and torch.equal(state["w"], torch.arange(1000.0))


def test_a_state_over_the_bound_is_refused(peers):
    sender, receiver = peers
    receiver.max_bytes = 1000  # the state is four bytes a weight, 4000 and more
    try:
        with pytest.raises(DiLoCoStateError, match="over 1000 bytes"):
            receiver.recv_checkpoint(0, sender.metadata(), 3, TIMEOUT)
    finally:
        receiver.max_bytes = 1 << 30


def test_a_refusal_is_a_state_error_naming_the_status(peers):
    sender, receiver = peers
    with pytest.raises(DiLoCoStateError, match="HTTP 400"):  # torchft refuses a step it does not serve
        receiver.recv_checkpoint(0, sender.metadata(), 4, TIMEOUT)
