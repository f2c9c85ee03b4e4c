"""Coordinators on an injected clock, built on demand by a test and closed after it."""

from __future__ import annotations

import pytest

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl_lab.coordinator_double import ClockedCoordinator


@pytest.fixture
def clocked(tmp_path):
    """`clocked(**fields)`: a ClockedCoordinator whose CoordinatorConfig has these fields (defaults elsewhere)."""
    made: list[ClockedCoordinator] = []

    def build(**config) -> ClockedCoordinator:
        made.append(ClockedCoordinator(tmp_path / str(len(made)), CoordinatorConfig(**config)))
        return made[-1]

    try:
        yield build
    finally:
        for world in made:
            world.close()
