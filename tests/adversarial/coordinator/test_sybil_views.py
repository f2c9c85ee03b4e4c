"""Issue 57, attack 2: the operator's view eclipsed by ground keys.

501 keys whose node id starts with `00` joined once each; the nodes table, the relays panel, the SHARDCAST tree
and `swarmrl status` then showed only them (`ORDER BY node_id LIMIT 500`): the honest worker, the real relay
and the banned cheater vanished. Now every bounded view ranks members by what cannot be minted for free and says
what it left out. The honest members act through HTTP; ten thousand ground keys are written into the database.
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from swarmrl.coordinator.status import summary_view
from swarmrl.identity import Identity
from swarmrl_lab import crowd
from swarmrl_lab.coordinator_double import ClockedCoordinator, accept, leased_submit

GROUND = 10_000
FAKE_RELAYS = 1_000
RELAY_REPORT = {
    "url": "http://127.0.0.1:8901",
    "upstreams": ["http://127.0.0.1:8900"],
    "versions": [{"version": 3, "complete": True, "bytes": 1000}],
}


def honest_swarm(clocked, **config):
    """A proven worker, a real relay the operator named, a banned cheater, then the ground keys."""
    relay_identity = Identity.generate()
    world: ClockedCoordinator = clocked(
        requests_per_minute=100_000,
        hard_rejects_before_ban=1,
        operator_relays=[relay_identity.node_id],
        **config,
    )
    worker = world.node()
    accept(world.validator, leased_submit(worker, "r", b"honest work"))
    relay = world.node(role="relay", identity=relay_identity)
    relay.heartbeat("r", relay=RELAY_REPORT)
    cheater = world.node()
    forged = leased_submit(cheater, "r", b"forged work")
    world.validator.post_verdict(forged.id, accept=False, check="upload_hash", reason="forged")
    state, now = world.app.state.coordinator, world.clock()
    ground = crowd.ground_ids(GROUND, prefix="00")
    crowd.add_members(state, "r", ground[FAKE_RELAYS:], now=now)
    crowd.add_members(state, "r", ground[:FAKE_RELAYS], now=now, role="relay")
    crowd.add_relay_reports(state, "r", ground[:FAKE_RELAYS], now=now, version=999_999)
    return world, worker, relay, cheater


@pytest.mark.slow  # ten thousand members
def test_ten_thousand_ground_keys_eclipse_no_honest_member_in_any_view(clocked):
    world, worker, relay, cheater = honest_swarm(clocked)
    honest = {worker.node_id, relay.node_id, cheater.node_id}
    for when in ("the keys are alive", "the keys fell silent"):
        summary = world.admin.reads.summary("r")
        shown = {n.node_id: n for n in summary.nodes}
        assert len(shown) == 500 and summary.nodes_total == GROUND + 3, when
        assert honest <= set(shown), when
        assert shown[cheater.node_id].banned and shown[worker.node_id].accepted == 1
        assert [n.node_id for n in summary.nodes[:2]] == [relay.node_id, worker.node_id], when
        assert sum(summary.nodes_left_out.values()) == GROUND + 3 - 500
        (operators,) = [r for r in summary.relays if r.node_id == relay.node_id]  # first, and marked
        assert operators.operator and summary.relays[0].node_id == relay.node_id
        assert len(summary.relays) == 500 and sum(summary.relays_left_out.values()) == FAKE_RELAYS + 1 - 500
        listed = {m["node_id"] for m in httpx.get(f"{world.url}/v1/runs/r/nodes").json()}
        assert {worker.node_id, relay.node_id, cheater.node_id} <= listed, when
        console = Console(width=400, record=True)
        console.print(summary_view(summary, world.url))
        text = console.export_text()
        for node in (worker, relay, cheater):
            assert node.node_id[:12] in text, when
        assert "never-proven nodes not shown" in text and "(operator)" in text, when
        world.wait(120.0, worker, relay)  # the ground keys stop heartbeating; the honest ones go on
    assert "idle never-proven" in summary.nodes_left_out


def test_a_view_says_what_it_left_out(clocked):
    world, worker, relay, cheater = honest_swarm(clocked, list_limit=3)
    summary = world.admin.reads.summary("r")
    assert [n.node_id for n in summary.nodes] == [relay.node_id, worker.node_id, cheater.node_id]
    assert summary.nodes_left_out == {"never-proven": GROUND}
    listed = httpx.get(f"{world.url}/v1/runs/r/nodes")
    assert [m["node_id"] for m in listed.json()] == [relay.node_id, worker.node_id, cheater.node_id]
    assert listed.headers["X-Left-Out"] == f"never-proven={GROUND}"
    series = {  # one node_work series per node with accepted work; the rest counted, not listed
        (sample.labels.get("node"), sample.value)
        for family in text_string_to_metric_families(httpx.get(f"{world.url}/metrics").text)
        for sample in family.samples
        if sample.name.startswith("swarmrl_coordinator_node_work")
    }
    assert {node for node, _ in series} == {worker.node_id, None}
    assert (None, GROUND + 2) in series  # the ground keys, the relay and the cheater
    assert len(summary.relays) == 3 and summary.relays[0].node_id == relay.node_id
    assert summary.relays_left_out == {"never-proven": FAKE_RELAYS - 2}
