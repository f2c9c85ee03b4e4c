"""The [wan] section: every pair of regions needs one path; unknown names and repeats are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from swarmrl.configs import load_config
from swarmrl.configs.wan import WanConfig
from swarmrl_lab.wan import netns
from swarmrl_lab.wan.errors import WanUnavailable

REPO = Path(__file__).resolve().parents[3]

REGIONS = [
    {"name": "us", "uplink_mbit": 100, "downlink_mbit": 100},
    {"name": "eu", "uplink_mbit": 50, "downlink_mbit": 50},
]


def test_defaults_are_three_regions_joined_pairwise():
    wan = WanConfig()
    assert [r.name for r in wan.regions] == ["us", "eu", "asia"]
    assert wan.path("asia", "us").rtt_ms == 250
    assert wan.path("eu", "eu").rtt_ms == wan.intra_rtt_ms and wan.path("eu", "eu").loss == 0


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ([], "no path between"),
        ([{"between": ["us", "mars"], "rtt_ms": 10}], "unknown region"),
        ([{"between": ["us", "us"], "rtt_ms": 10}], "not a new pair"),
        (
            [{"between": ["us", "eu"], "rtt_ms": 10}, {"between": ["eu", "us"], "rtt_ms": 20}],
            "not a new pair",
        ),
    ],
)
def test_paths_must_join_every_pair_once(paths, message):
    with pytest.raises(ValidationError, match=message):
        WanConfig(regions=REGIONS, paths=paths, worker_regions=["us"])


def test_workers_must_sit_in_known_regions():
    with pytest.raises(ValidationError, match="worker_regions"):
        WanConfig(regions=REGIONS, paths=[{"between": ["us", "eu"], "rtt_ms": 10}], worker_regions=["asia"])


def test_region_names_and_loss_are_bounded():
    with pytest.raises(ValidationError):
        WanConfig(regions=[{"name": "US East", "uplink_mbit": 1, "downlink_mbit": 1}])
    with pytest.raises(ValidationError):
        WanConfig(paths=[{"between": ["us", "eu"], "rtt_ms": 10, "loss": 0.7}])


def test_the_run_config_carries_a_wan_section():
    config = load_config(None, ["wan.intra_rtt_ms=5", "wan.churn.relays=0"])
    assert config.wan.intra_rtt_ms == 5 and config.wan.churn.relays == 0


def test_a_non_root_user_is_told_in_one_line(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(WanUnavailable, match="needs root") as caught:
        netns.check_available()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "command",
    [["--wan", "demo-wan.toml"], ["--islands", "--wan", "demo-islands.toml"]],
    ids=["swarm", "islands"],
)
def test_demo_wan_as_a_user_without_root_ends_with_one_line_and_code_2(monkeypatch, tmp_path, command):
    from typer.testing import CliRunner

    from swarmrl.cli import app

    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    *flags, config = command
    result = CliRunner().invoke(
        app, ["demo", *flags, f"@{REPO / 'configs' / config}", f"run.root='{tmp_path}'"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: the WAN emulator needs root (network namespaces, tc, nftables); run it as root"
    ]
    assert not list(tmp_path.iterdir())  # refused before it built or ran anything


def test_islands_across_the_wan_with_swarm_islands_are_refused_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from swarmrl.cli import app

    config = f"@{REPO / 'configs' / 'demo-islands.toml'}"
    result = CliRunner().invoke(
        app, ["demo", "--islands", "--wan", config, f"run.root='{tmp_path}'", "islands.workers='swarm'"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: config error: demo --islands --wan runs islands with local workers: set islands.workers = 'local'"
    ]
    assert not list(tmp_path.iterdir())
