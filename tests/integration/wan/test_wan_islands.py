"""`swarmrl demo --islands --wan` at toy size: two trainer islands in two emulated regions 300 ms apart, merging
every two steps with the merge's communication overlapped. Every merge crosses the path (none is quicker than
its round trip), commits, and the run ends on one merged policy on both islands; the namespaces are removed.
Needs root (network namespaces, tc, nftables); deselect with -m "not netns" where they are unavailable."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmrl_lab.wan import netns

pytest.importorskip("torchft")

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.swarm, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[3]
RTT_S = 0.3
OVERRIDES = [
    "model.tiny.hidden_size=32",
    "model.tiny.num_layers=2",
    "sft.steps=20",
    "trainer.steps=6",
    "trainer.prompts_per_step=16",
    "worker.num_workers=1",
    "eval.num_tasks=20",
    "islands.merge_every=2",
    "islands.overlap_steps=1",
    "wan.regions=[{name='us', uplink_mbit=100, downlink_mbit=100}, {name='eu', uplink_mbit=20, downlink_mbit=20}]",
    f"wan.paths=[{{between=['us', 'eu'], rtt_ms={1000 * RTT_S:.0f}, jitter_ms=2, loss=0.005}}]",
    "wan.worker_regions=['us', 'eu']",
    "wan.baseline=false",
]


def _digest(checkpoint: Path) -> str:
    return hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted(checkpoint.glob("*.safetensors")))
    ).hexdigest()


def test_two_islands_merge_across_an_emulated_path(tmp_path, emulator_available):
    before = set(netns.namespaces())
    done = subprocess.run(
        [
            sys.executable, "-m", "swarmrl.cli", "demo", "--islands", "--wan",
            f"@{REPO / 'configs' / 'demo-islands.toml'}", f"run.root='{tmp_path}'", "run.name='toy'", *OVERRIDES,
        ],
        capture_output=True, text=True, timeout=540, cwd=tmp_path,
        env={**os.environ, "SWARMRL_LOG_FORMAT": "plain"},
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-4000:])
    result = json.loads((tmp_path / "toy" / "islands_wan_result.json").read_text())
    wan = result["wan"]
    assert (
        result["placement"] == {"lighthouse": "us", "island-0": "us", "island-1": "eu"}
        and "lan" not in result
    )
    assert wan["merges_failed"] == 0
    for island in wan["per_island"]:
        assert island["merges_committed"] == 3 and island["steps"] == 6, island
        # A merge's quorum and all-gather cross the path: none completes within one round trip (on loopback
        # they take ~0.1 s).
        assert min(island["merge_seconds"]) > RTT_S, island
        blocked = zip(island["merge_blocked_seconds"], island["merge_seconds"], strict=True)
        assert all(0 <= b <= s for b, s in blocked), island
        assert 0 < island["utilisation"] <= 1
    # The last merge blocks even with the overlap: both islands end on the same merged policy.
    islands = tmp_path / "toy" / "wan" / "islands"
    assert _digest(islands / "island-0/checkpoints/step_6") == _digest(
        islands / "island-1/checkpoints/step_6"
    )
    assert "trainer utilisation" in done.stdout
    assert set(netns.namespaces()) <= before  # nothing of the emulation is left
