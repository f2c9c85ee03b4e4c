"""Two trainer islands, each a swarm of its own (coordinator, relay, validator, worker node), merged through a
torchft quorum: what each island's SHARDCAST origin serves at a merge step is the merged policy."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from polling import wait_for

from swarmrl.configs import load_config
from swarmrl.coordinator.client import PublicReads
from swarmrl.islands.demo import read_merges, weights_digest
from swarmrl.islands.launch import IslandFleet, prepare_islands
from swarmrl.shardcast.client import fetch_checkpoint

pytest.importorskip("torchft")


pytestmark = pytest.mark.swarm


def _digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.safetensors")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_swarm_islands_publish_the_merged_policy_through_shardcast(tmp_path):
    overrides = [
        f"run.root='{tmp_path}'",
        "run.name='isl'",
        "trainer.steps=4",
        "trainer.prompts_per_step=8",
        "contract.prompts_per_batch=8",
        "sft.steps=20",
        "islands.workers='swarm'",
        "islands.merge_every=2",
        "swarm.honest_workers=1",
        "swarm.cheating_workers=0",
        "swarm.relays=1",
        "swarm.validators=1",
        "swarm.poll_seconds=0.2",
    ]
    config = load_config("configs/demo-islands.toml", overrides)
    _, islands = prepare_islands(config)
    fetched = tmp_path / "fetched"
    with IslandFleet(config, islands) as fleet:
        for index in range(2):
            fleet.start(index)
        swarm = fleet.swarms[1]
        wait_for(lambda: any(m["committed"] for m in read_merges(islands[1])), 300, "island 1's first merge")
        # A node of island 1 fetches the merged version through island 1's relay, verified against its trainer.
        path = fetch_checkpoint(
            swarm.relay_urls,
            2,
            fetched,
            swarm.identity("trainer").node_id,
            run_id=swarm.config.run.id,
        )
        with PublicReads.at(swarm.coordinator_url) as client:
            published = client.run_state(swarm.config.run.id).current_step
        fleet.wait(timeout_s=300)
    assert published >= 2
    # Island 1's relay served island 1's merged step 2, which island 0 computed bit for bit as well.
    assert _digest(path) == weights_digest(islands[1], 2) == weights_digest(islands[0], 2)
    for rundir in islands:
        merges = read_merges(rundir)
        assert [m["step"] for m in merges] == [2, 4]
        assert all(m["committed"] and m["participants"] == 2 for m in merges)
    assert weights_digest(islands[0], 4) == weights_digest(islands[1], 4)
    assert weights_digest(islands[0], 3) != weights_digest(islands[1], 3)
