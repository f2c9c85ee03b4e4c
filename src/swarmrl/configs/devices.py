"""The spelling of a role's `device` setting, checked where a config is read (no torch import here)."""

from __future__ import annotations

import re

_SETTING = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
DEVICE_HELP = "'cpu', 'cuda' (this process's GPU), 'cuda:N', or 'auto' (cuda when one is visible, else cpu)"


class InvalidDevice(ValueError):
    """A device setting that is not one of auto, cpu, cuda, cuda:N."""


def check_device(setting: str) -> str:
    """`setting` when it is spelled right (no torch import: configs are read by processes that never load it)."""
    if not isinstance(setting, str) or not _SETTING.match(setting):
        raise InvalidDevice(f"device {setting!r} is not one of {DEVICE_HELP}")
    return setting
