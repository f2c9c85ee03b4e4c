"""What every test of the emulated WAN needs: root, network namespaces, tc and nftables."""

from __future__ import annotations

import pytest

from swarmrl_lab.wan import netns


@pytest.fixture(scope="module")
def emulator_available() -> None:
    """Fails (never skips) where the emulator cannot run, saying how to deselect these tests."""
    try:
        netns.check_available()
    except netns.WanUnavailable as exc:
        pytest.fail(f'{exc}; deselect with -m "not netns" where namespaces are unavailable')
