"""The `device` setting of a role (trainer, worker, validator): "auto", "cpu", "cuda" or "cuda:N".

The config checks the spelling only (`check_device`), so a CPU machine can still read a run config whose
trainer wants a GPU; each role resolves its own setting (`resolve_device`) when it starts, before any work, so a
GPU that is not there is refused at startup with `DeviceUnavailable`, never mid-run.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_SETTING = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
DEVICE_HELP = "'cpu', 'cuda' (this process's GPU), 'cuda:N', or 'auto' (cuda when one is visible, else cpu)"


class InvalidDevice(ValueError):
    """A device setting that is not one of auto, cpu, cuda, cuda:N."""


class DeviceUnavailable(RuntimeError):
    """A device setting names a CUDA device this machine does not have."""


def check_device(setting: str) -> str:
    """`setting` when it is spelled right (no torch import: configs are read by processes that never load it)."""
    if not isinstance(setting, str) or not _SETTING.match(setting):
        raise InvalidDevice(f"device {setting!r} is not one of {DEVICE_HELP}")
    return setting


def resolve_device(setting: str, local_rank: int = 0) -> torch.device:
    """The torch device a role runs on. Plain "cuda" and "auto" take GPU `local_rank` (a torchrun rank's own
    GPU); "cuda:N" is taken as given."""
    import torch

    check_device(setting)
    if setting == "cpu" or (setting == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    index = local_rank if setting in ("auto", "cuda") else int(setting.partition(":")[2])
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index >= count:
        visible = f"{count} CUDA device(s) visible" if count else "no CUDA device visible"
        raise DeviceUnavailable(f"device {setting!r} asks for cuda:{index}, and this machine has {visible}")
    return torch.device("cuda", index)


def hardware_of(device: torch.device, torch_threads: int) -> dict[str, object]:
    """What a node declares to the coordinator when it registers (informational: operators and the dashboard
    see which nodes generate or judge on which hardware)."""
    import torch

    hardware: dict[str, object] = {"device": str(device), "torch_threads": torch_threads}
    if device.type == "cuda":
        hardware["gpu"] = torch.cuda.get_device_name(device)
    return hardware
