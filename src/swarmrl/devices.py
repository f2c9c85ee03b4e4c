"""The `device` setting of a role (trainer, worker, validator): "auto", "cpu", "cuda" or "cuda:N".

The config checks the spelling only (`check_device`), so a CPU machine can still read a run config whose
trainer wants a GPU; each role resolves its own setting (`resolve_device`) when it starts, before any work, so a
GPU that is not there is refused at startup with `DeviceUnavailable`, never mid-run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.configs.devices import check_device

if TYPE_CHECKING:
    import torch

    from swarmrl.configs.run import RunConfig


class DeviceUnavailable(RuntimeError):
    """A device setting names a CUDA device this machine does not have."""


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


def check_run_devices(config: RunConfig) -> None:
    """Refuse, before any work (SFT included), a trainer or worker device this machine lacks
    (`DeviceUnavailable`); called by what starts both roles on one machine (`rl`, `demo`)."""
    resolve_device(config.trainer.device)
    resolve_device(config.worker.device)
