"""Load a checkpoint straight into FSDP2 shards: no rank ever holds the whole model.

`load_model` followed by `fully_shard` makes every rank read and keep the full model (in fp32: 4 bytes a
parameter, 128 GB for a 32B model) before sharding throws most of it away. Here the model is built with its
parameters on the meta device (no memory), wrapped and sharded by the caller, then each rank allocates its
own shards and fills them from the safetensors files, reading only the rows of each tensor it owns
(`safe_open(...).get_slice`): about 1/world of the checkpoint's bytes per rank.

Tied weights (an LM head that is the input embedding) are one parameter, filled once from whichever of its
names the checkpoint holds. Buffers, such as rotary `inv_freq`, are not in checkpoints: they are computed from
the config when the model is built (only parameters go to the meta device) and restored after allocation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import safe_open
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from swarmrl.models.construction import MODEL_CONSTRUCTION
from swarmrl.models.loading import ModelLoadError

_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "BF16": 2, "F16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip


@dataclass
class LoadStats:
    """What one rank read: the bytes of the slices it asked for, against the checkpoint's tensor bytes."""

    bytes_read: int = 0
    checkpoint_bytes: int = 0

    @property
    def fraction(self) -> float:
        return self.bytes_read / self.checkpoint_bytes if self.checkpoint_bytes else 0.0


WrappedT = TypeVar("WrappedT", bound=nn.Module)


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Modules built inside keep their parameters on the meta device and their buffers real.

    `torch.device("meta")` would put buffers there too, and non-persistent buffers (rotary frequencies) can
    only be recomputed by the module that made them. Each parameter is created on the CPU by its module's
    constructor, never touched (so never resident), and moved to meta as it is registered; weight
    initialisation then runs on meta, for free.
    """
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        # An already-meta parameter is a tie being made (lm_head = embed_tokens): keep it the same object.
        if param is not None and not param.is_meta:
            module._parameters[name] = type(param)(param.to("meta"), requires_grad=param.requires_grad)

    # Patching the class is the point: every module's constructor registers through it.
    nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def empty_model(path: str | Path, attn_implementation: str = "sdpa") -> PreTrainedModel:
    """The causal LM of a checkpoint directory in fp32, parameters on meta, buffers computed on the CPU."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path}: no config.json, not a model directory")
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with MODEL_CONSTRUCTION, parameters_on_meta():
        return AutoModelForCausalLM.from_config(
            config, dtype=torch.float32, attn_implementation=attn_implementation
        )


def load_sharded(
    path: str | Path,
    wrap: Callable[[PreTrainedModel], WrappedT],
    device: torch.device,
    attn_implementation: str = "sdpa",
) -> tuple[PreTrainedModel, WrappedT, LoadStats]:
    """(model, root, stats): the checkpoint at `path` built on meta, handed to `wrap` (which wraps and
    `fully_shard`s it and returns the root), then each rank's shards allocated on `device` and read from the
    checkpoint. Every rank must call it."""
    model = empty_model(path, attn_implementation)
    root = wrap(model)
    return model, root, materialise(root, model, path, device)


def materialise(root: nn.Module, model: nn.Module, path: str | Path, device: torch.device) -> LoadStats:
    """Allocate `root`'s (sharded) meta parameters on `device` and fill `model`'s from the checkpoint."""
    index = _index(Path(path))
    groups = _names_by_tensor(model)
    # The checkpoint's name for each parameter (a tied head is saved once, under either name).
    keys = [next((name for name in names if name in index), None) for names in groups]
    missing = [names[0] for names, key in zip(groups, keys, strict=True) if key is None]
    if missing:
        raise ModelLoadError(f"{path}: the checkpoint lacks {len(missing)} parameter(s): {missing[:5]}")
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers() if not buffer.is_meta}
    root.to_empty(device=device)  # an FSDP root re-links its padded shard storage here
    _retie(model, groups)
    stats = LoadStats(checkpoint_bytes=sum(size for _, size in index.values()))
    with ExitStack() as stack, torch.no_grad():
        handles = {
            file: stack.enter_context(safe_open(file, framework="pt", device="cpu"))
            for file in {file for file, _ in index.values()}
        }
        for names, key in zip(groups, keys, strict=True):
            assert key is not None  # a missing name was refused above
            stored = handles[index[key][0]].get_slice(key)
            stats.bytes_read += _fill(model.get_parameter(names[0]), stored, key)
        for name, value in buffers.items():
            # A persistent buffer the checkpoint holds wins over the value computed at construction.
            source = handles[index[name][0]].get_tensor(name) if name in index else value
            model.get_buffer(name).copy_(source)
    return stats


def _names_by_tensor(model: nn.Module) -> list[list[str]]:
    """All the names of each parameter: a tied head answers to both the embedding's name and its own."""
    out: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        out.setdefault(id(param), []).append(name)
    return list(out.values())


def _retie(model: nn.Module, groups: list[list[str]]) -> None:
    """`to_empty` gives each module a new parameter of its own (FSDP2 keeps its shared ones shared): make the
    names that shared one parameter before share it again, so a tied head is filled and trained as one."""
    for names in groups:
        first = model.get_parameter(names[0])
        for name in names[1:]:
            owner, _, leaf = name.rpartition(".")
            module = model.get_submodule(owner)
            if module._parameters[leaf] is not first:
                module._parameters[leaf] = first


def _fill(param: nn.Parameter, stored: Any, key: str) -> int:
    """Copy this rank's part of `stored` (a safetensors slice) into `param`; returns the bytes read."""
    if isinstance(param, DTensor):
        local = param.to_local()
        # Where the local shard lies in the whole tensor, for any placement: the (private) helper
        # torch.distributed.checkpoint reads slices with, rather than re-deriving FSDP2's chunking rule.
        shape, offset = compute_local_shape_and_global_offset(
            param.shape, param.device_mesh, param.placements
        )
    else:
        local, shape, offset = param, tuple(param.shape), (0,) * param.dim()
    if tuple(stored.get_shape()) != tuple(param.shape):
        raise ModelLoadError(
            f"{key}: the checkpoint's shape {stored.get_shape()} is not the model's {tuple(param.shape)}"
        )
    if 0 in shape:  # an uneven split can leave a rank with no rows of a small tensor
        return 0
    part = stored[tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))]
    local.copy_(part.reshape(local.shape))
    return part.numel() * part.element_size()


def _index(path: Path) -> dict[str, tuple[Path, int]]:
    """Tensor name → (the safetensors file that holds it, its stored bytes); a checkpoint may be split."""
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{path}: no *.safetensors weights")
    out: dict[str, tuple[Path, int]] = {}
    for file in files:
        with safe_open(file, framework="pt", device="cpu") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                stored = handle.get_slice(key)
                if stored.get_dtype() not in _DTYPE_BYTES:
                    raise ModelLoadError(
                        f"{file}: {key} is stored as {stored.get_dtype()}, not a dtype read here"
                    )
                out[key] = (file, math.prod(stored.get_shape()) * _DTYPE_BYTES[stored.get_dtype()])
    return out
