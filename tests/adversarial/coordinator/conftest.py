"""A clocked coordinator per test, as many as it asks for, each closed after it."""

from __future__ import annotations

import pytest

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl_lab.coordinator_double import ClockedCoordinator


@pytest.fixture
def clocked(tmp_path):
    """`clocked(**config)`: a new ClockedCoordinator (run "r") with that CoordinatorConfig."""
    worlds: list[ClockedCoordinator] = []

    def make(**config) -> ClockedCoordinator:
        worlds.append(ClockedCoordinator(tmp_path / str(len(worlds)), CoordinatorConfig(**config)))
        return worlds[-1]

    try:
        yield make
    finally:
        for world in worlds:
            world.close()
