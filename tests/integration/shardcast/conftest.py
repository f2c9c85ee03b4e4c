"""Fixtures of the shardcast integration tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def servers():
    """Servers a test started, stopped at its end (newest first)."""
    started = []
    yield started
    for server in reversed(started):
        server.stop()
