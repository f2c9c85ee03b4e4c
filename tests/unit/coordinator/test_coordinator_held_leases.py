"""Which woken lease request looks first: the node that returns its units soonest."""

from __future__ import annotations

from swarmrl.coordinator.server.held import FASTER_FIRST_S, LOTTERY_S, HeldLeases


def test_a_node_waits_only_for_one_at_least_one_and_a_half_times_faster_held_with_it():
    held = HeldLeases()
    held.hold("r", "near", 0.3)
    held.hold("r", "far", 1.0)
    held.hold("r", "close-second", 0.4)
    assert held.delay("r", "near") == 0.0
    assert held.delay("r", "close-second") == 0.0  # 0.4 < 1.5 x 0.3
    assert held.delay("r", "far") == FASTER_FIRST_S
    held.hold("r", "fresh", None)  # not measured: after every measured node, never before one
    assert FASTER_FIRST_S <= held.delay("r", "fresh") < FASTER_FIRST_S + LOTTERY_S
    assert held.delay("r", "near") == 0.0
    held.hold("other-run", "slow", 9.0)  # another run's requests are not compared
    assert held.delay("other-run", "slow") == 0.0


def test_a_request_that_ended_no_longer_counts_and_nothing_is_kept_for_it():
    held = HeldLeases()
    held.hold("r", "near", 0.3)
    held.hold("r", "far", 1.0)
    held.release("r", "near")
    assert held.delay("r", "far") == 0.0
    held.release("r", "far")
    assert held.delay("r", "far") == 0.0 and held._seconds == {} and held._fastest == {}
    for i in range(1000):  # requests come and go under a fast node that stays: the heap stays small
        held.hold("r", "stays", 0.1)
        held.hold("r", f"n{i}", 1.0 + i)
        held.release("r", f"n{i}")
    assert len(held._fastest["r"]) <= 2 * len(held._seconds["r"]) + 17


def test_unmeasured_nodes_draw_lots_among_themselves():
    """Issue 57: a unit freed in the unproven pool went to whichever fresh key polled hardest; now each woken
    unmeasured request looks after its own random delay, so the order among them is a draw."""
    held = HeldLeases()
    for i in range(20):
        held.hold("r", f"fresh{i}", None)
    delays = [held.delay("r", f"fresh{i}") for i in range(20)]
    assert all(0.0 <= d < LOTTERY_S for d in delays)  # no measured node held: no FASTER_FIRST_S
    assert len(set(delays)) > 1  # twenty equal draws would mean no lottery at all
