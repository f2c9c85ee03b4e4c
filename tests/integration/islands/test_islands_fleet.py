"""Two trainer islands on 127.0.0.1, each with a worker, merged through a torchft quorum with int8 pseudo-gradients."""

from __future__ import annotations

import json

import pytest
import torch
from polling import wait_for

from swarmrl.configs import load_config
from swarmrl.diloco.codecs import make_codec
from swarmrl.diloco.communicators import LocalCommunicator
from swarmrl.islands.demo import island_summary, read_merges, weights_digest
from swarmrl.islands.launch import IslandFleet, prepare_islands
from swarmrl.islands.merge import IslandMerger
from swarmrl.models import load_model
from swarmrl.steps import checkpoint_dir, latest_checkpoint

pytest.importorskip("torchft")


pytestmark = pytest.mark.swarm


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("islands")  # shared: the SFT start policy is built once and cached


def _config(root, name: str, steps: int, **islands):
    overrides = [
        f"run.root='{root}'",
        f"run.name='{name}'",
        f"trainer.steps={steps}",
        "trainer.prompts_per_step=16",
        "worker.num_workers=1",
        "sft.steps=20",
        "islands.merge_every=2",
        *(f"islands.{key}={value}" for key, value in islands.items()),
    ]
    return load_config("configs/demo-islands.toml", overrides)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_islands_merge_to_the_same_policy(root):
    config = _config(root, "merge", steps=4)
    base, islands = prepare_islands(config)
    with IslandFleet(config, islands) as fleet:
        for index in range(2):
            fleet.start(index)
        fleet.wait(timeout_s=240)
    for rundir in islands:
        merges = read_merges(rundir)
        assert [m["step"] for m in merges] == [2, 4]
        assert all(m["committed"] and m["participants"] == 2 and m["contributors"] == 2 for m in merges)
        # int8 both ways: about one byte per parameter per merge (ring all-reduce over two islands).
        assert all(0 < m["wire_bytes"] < 2_000_000 for m in merges)
        # Each merge is in its step's trainer metrics too (what a swarm trainer sends its dashboard).
        records = rundir.read_metrics()
        shown = [
            (r["step"], r["islands/round"], r["islands/participants"])
            for r in records
            if "islands/round" in r
        ]
        assert shown == [(2, 1.0, 2.0), (4, 2.0, 2.0)]
    # The merged policies are bit-identical across islands; the local steps between merges are not.
    assert latest_checkpoint(islands[0].checkpoints) == latest_checkpoint(islands[1].checkpoints) == 4
    assert weights_digest(islands[0], 4) == weights_digest(islands[1], 4)
    assert weights_digest(islands[0], 2) == weights_digest(islands[1], 2)
    assert weights_digest(islands[0], 3) != weights_digest(islands[1], 3)
    assert weights_digest(islands[0], 4) != weights_digest(islands[0], 3)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_streaming_fragments_merge_half_the_policy_at_each_merge_point(root):
    config = _config(root, "fragments", steps=4, fragments=2, codec="'fp32'")
    base, islands = prepare_islands(config)
    with IslandFleet(config, islands) as fleet:
        for index in range(2):
            fleet.start(index)
        fleet.wait(timeout_s=240)
    parameters = sum(p.numel() for p in load_model(checkpoint_dir(base.checkpoints, 0)).parameters())
    for rundir in islands:
        merges = read_merges(rundir)
        # H = 2, F = 2: fragment 0 after the first step of each window, fragment 1 after the second.
        assert [(m["step"], m["fragment"]) for m in merges] == [(1, 0), (2, 1), (3, 0), (4, 1)]
        assert all(m["committed"] and m["participants"] == 2 for m in merges)
        # fp32 ring all-reduce of one fragment: 4 bytes x its share of the parameters, not of all of them.
        assert all(m["wire_bytes"] < 0.8 * 4 * parameters for m in merges)
    first, second = (load_model(checkpoint_dir(r.checkpoints, 4)) for r in islands)
    fragment_1 = IslandMerger(
        first, LocalCommunicator(), make_codec("fp32"), outer_lr=1.0, outer_momentum=0.0, fragments=2
    ).fragments[1]
    params = [list(m.parameters()) for m in (first, second)]
    # Just merged at step 4: fragment 1 is bit-identical across islands; fragment 0 took a local step since.
    assert all(torch.equal(params[0][i], params[1][i]) for i in fragment_1)
    assert not all(torch.equal(a, b) for a, b in zip(*params, strict=True))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_island_killed_and_restarted_rejoins_from_the_merged_policy(root):
    # 60 steps: with 30 the survivor, merging alone, sometimes finished its run before the restarted island's
    # process was up, and the restarted island then had no peer to heal from.
    config = _config(
        root, "rejoin", steps=60, heartbeat_timeout_s=2.0, join_timeout_s=30.0, collective_timeout_s=10.0
    )
    base, islands = prepare_islands(config)
    with IslandFleet(config, islands) as fleet:
        for index in range(2):
            fleet.start(index)
        wait_for(lambda: any(m["committed"] for m in read_merges(islands[1])), 120, "island 1's first merge")
        fleet.kill(1)
        killed_at = len(read_merges(islands[1]))
        # Island 0 carries on alone: its next merge drops the dead island after the heartbeat timeout.
        wait_for(
            lambda: any(m["participants"] == 1 and m["committed"] for m in read_merges(islands[0])),
            60,
            "island 0 to merge without island 1",
        )
        # The restarted island heartbeats as soon as its trainer starts, so the survivor's next merge waits
        # for it (join timeout) instead of finishing alone.
        fleet.start(1)
        fleet.wait(timeout_s=320)
    survivor, restarted = read_merges(islands[0]), read_merges(islands[1])
    rejoined = restarted[killed_at:]
    assert rejoined and rejoined[0]["healed"], json.dumps(restarted, indent=1)
    assert rejoined[0]["committed"] and rejoined[0]["participants"] == 2 and rejoined[0]["contributors"] == 1
    # The rejoined island continues from the merged policy: the checkpoint of its rejoining merge is
    # bit-identical to the survivor's checkpoint of the same round (the islands' step numbers may differ).
    peer = next(m for m in survivor if m["round"] == rejoined[0]["round"] and m["committed"])
    assert peer["participants"] == 2
    assert weights_digest(islands[1], rejoined[0]["step"]) == weights_digest(islands[0], peer["step"])
    assert latest_checkpoint(islands[0].checkpoints) == latest_checkpoint(islands[1].checkpoints) == 60
    assert island_summary(1, islands[1])["heals"] == 1
