"""The [islands] section and each island's derived config."""

from __future__ import annotations

import pytest

from swarmrl.configs import ConfigError, load_config
from swarmrl.islands.launch import island_config


def test_demo_islands_config_and_island_configs(tmp_path):
    config = load_config("configs/demo-islands.toml", [f"run.root='{tmp_path}'"])
    assert (config.islands.count, config.islands.merge_every, config.islands.codec) == (2, 10, "int8")
    # Same total prompts per step as configs/demo.toml's single trainer.
    assert (
        config.islands.count * config.trainer.prompts_per_step
        == load_config("configs/demo.toml").trainer.prompts_per_step
    )
    first, second = island_config(config, 0), island_config(config, 1)
    assert first.run.directory == tmp_path / "demo-islands" / "islands" / "island-0"
    assert first.contract.seed != second.contract.seed and first.run.id != second.run.id
    assert first.islands == second.islands == config.islands
    assert first.trainer == config.trainer
    assert "/" not in first.run.id  # a swarm island's coordinator routes by it (one URL path segment)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("islands.codec='int4'", "codec"),
        ("islands.merge_every=0", "merge_every"),
        ("islands.cout=2", "cout"),
        ("islands.fragments=11", "fragments"),
        ("islands.workers='cloud'", "workers"),
    ],
)
def test_bad_islands_section_is_a_config_error(override, field):
    with pytest.raises(ConfigError, match=field):
        load_config("configs/demo-islands.toml", [override])
