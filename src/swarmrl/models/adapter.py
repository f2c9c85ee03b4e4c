"""LoRA adapter checkpoints: what a LoRA run publishes after step 0, and their merge onto the base weights.

An adapter checkpoint `step_k/` holds every file of the base checkpoint except its weights (config.json,
tokenizer, generation config: byte-identical each step, so their shardcast deltas are empty), plus peft's
`adapter_config.json` and `adapter_model.safetensors`. The config's `base_model_name_or_path` names the
sibling directory with the full base weights (`step_0`), which is published once and never again.

Workers and validators merge `W + scale·B·A` into their own copy of the base. The product is summed as r
outer products in a fixed order with elementwise kernels only, in fp32, then cast to the base tensor's
dtype: no matmul whose reduction order depends on the thread count or the device, so every machine that
merges the same adapter gets the same bits, and a TOPLOC proof built on a worker's merged weights verifies
on a validator's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_BASE_DIR = re.compile(r"^step_(\d+)$")
# peft's saved names: base_model.model.<module path>.lora_A.weight
_ADAPTER_KEY = re.compile(r"^base_model\.model\.(.+)\.lora_([AB])\.weight$")


class AdapterError(ValueError):
    """An adapter checkpoint is incomplete, uses a LoRA feature the merge does not implement, or does not fit
    its base model."""


def is_adapter_checkpoint(path: Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def read_adapter_config(path: Path) -> dict[str, Any]:
    file = Path(path) / ADAPTER_CONFIG
    try:
        config = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AdapterError(f"{file}: unreadable adapter config ({exc})") from exc
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise AdapterError(f"{file}: not a LoRA adapter config")
    # Features that change the merge formula or add weights beyond A and B; refused rather than mis-merged.
    unsupported = {
        "use_dora": bool(config.get("use_dora")),
        "fan_in_fan_out": bool(config.get("fan_in_fan_out")),
        "rank_pattern": bool(config.get("rank_pattern")),
        "alpha_pattern": bool(config.get("alpha_pattern")),
        "modules_to_save": bool(config.get("modules_to_save")),
        "bias": config.get("bias", "none") != "none",
    }
    used = sorted(name for name, on in unsupported.items() if on)
    if used:
        raise AdapterError(f"{file}: LoRA options the merge does not implement: {used}")
    return config


def base_step(path: Path) -> int:
    """The step whose full weights the adapter at `path` is merged onto."""
    name = str(read_adapter_config(path).get("base_model_name_or_path") or "")
    match = _BASE_DIR.match(name)
    if match is None:
        raise AdapterError(f"{path}: base_model_name_or_path {name!r} is not a sibling step_<k> directory")
    return int(match.group(1))


def base_checkpoint(path: Path) -> Path:
    """The base checkpoint directory next to the adapter checkpoint `path`; it must hold full weights."""
    path = Path(path)
    base = path.parent / f"step_{base_step(path)}"
    if not (base / "config.json").is_file():
        raise AdapterError(f"{path} is an adapter of {base.name}, which is not here: fetch it first")
    if is_adapter_checkpoint(base):
        raise AdapterError(f"{path}: its base {base.name} is itself an adapter, not full weights")
    return base


def fetch_base(path: Path, fetch: Callable[[int], object], pinned: list[int]) -> None:
    """After fetching the checkpoint `path`: when it is an adapter, pin its base step (so no clean-up of old
    versions deletes it) and `fetch` that (a fetcher returns at once for a version it holds)."""
    if not is_adapter_checkpoint(path):
        return
    step = base_step(path)
    if step not in pinned:
        pinned.append(step)
    fetch(step)


def lora_scale(config: dict[str, Any]) -> float:
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    return alpha / rank**0.5 if config.get("use_rslora") else alpha / rank


def adapter_pairs(path: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{base weight name: (A [r, in], B [out, r])} of an adapter checkpoint."""
    file = Path(path) / ADAPTER_WEIGHTS
    try:
        tensors = load_file(file)
    except Exception as exc:  # safetensors raises its own SafetensorError besides OSError
        raise AdapterError(f"{file}: unreadable adapter weights ({exc})") from exc
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _ADAPTER_KEY.match(key)
        if match is None:
            raise AdapterError(f"{file}: {key!r} is not a LoRA A or B weight")
        halves.setdefault(f"{match.group(1)}.weight", {})[match.group(2)] = tensor
    pairs = {}
    for name, half in halves.items():
        if set(half) != {"A", "B"}:
            raise AdapterError(f"{file}: {name} has lora_{''.join(half)} without its partner")
        pairs[name] = (half["A"], half["B"])
    return pairs


def merged_weight(weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """`weight + scale·B·A` in the weight's dtype, computed the same way on every machine (module doc)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1] or (b.shape[0], a.shape[1]) != weight.shape:
        raise AdapterError(
            f"adapter A {tuple(a.shape)} and B {tuple(b.shape)} do not fit a weight of {tuple(weight.shape)}"
        )
    a, b = a.to(weight.device, torch.float32), b.to(weight.device, torch.float32)
    delta = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
    for k in range(a.shape[0]):
        delta.add_(torch.outer(b[:, k], a[k]))
    return weight.float().add_(delta.mul_(scale)).to(weight.dtype)


def merge_into_state(state: dict[str, torch.Tensor], adapter: Path) -> dict[str, torch.Tensor]:
    """The base `state` with the adapter at `adapter` merged into its weights (a new dict; `state` kept)."""
    scale = lora_scale(read_adapter_config(adapter))
    merged = dict(state)
    for name, (a, b) in adapter_pairs(adapter).items():
        if name not in state:
            raise AdapterError(f"{adapter}: the base model has no weight {name!r} to merge into")
        merged[name] = merged_weight(state[name], a, b, scale)
    return merged
