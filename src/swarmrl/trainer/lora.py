"""The trainer's side of LoRA: wrap the fp32 base with peft adapters, resume them, write adapter checkpoints.

Only the adapters train (peft freezes the base, and the optimizer takes parameters that require grad), so
each checkpoint after step 0 is the adapter alone (`swarmrl.models.adapter` describes the directory and the
merge that workers and validators run on it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file, save_file

from swarmrl.configs.trainer import LoraSection
from swarmrl.models import load_model
from swarmrl.models.adapter import ADAPTER_WEIGHTS, is_adapter_checkpoint
from swarmrl.models.loading import atomic_directory
from swarmrl.steps import BASE_STEP
from swarmrl.trainer.checkpoint import checkpoint_dir, prune_checkpoints

_PEFT_PREFIX = "base_model.model."  # a PeftModel's state-dict names are the wrapped model's under this
_WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin")


class LoraRunError(ValueError):
    """A LoRA run's checkpoints do not fit LoRA training (full weights where an adapter is expected)."""


def wrap_lora(model: torch.nn.Module, section: LoraSection) -> PeftModel:
    """Inject adapters into `model` in place (its base weights frozen) and return peft's wrapper."""
    config = LoraConfig(
        r=section.r,
        lora_alpha=section.alpha,  # type: ignore[arg-type]  # peft types it int; it only scales alpha / r
        lora_dropout=section.dropout,
        target_modules=list(section.target_modules),
        bias="none",
    )
    peft_model = get_peft_model(model, config)
    # get_peft_model fills the name in from the model (a path on the trainer's disk); the adapter checkpoint
    # must name its sibling base directory instead.
    peft_model.peft_config["default"].base_model_name_or_path = f"step_{BASE_STEP}"
    return peft_model


def load_lora_policy(checkpoints: Path, step: int, section: LoraSection) -> PeftModel:
    """The fp32 base of step 0 with fresh adapters, or with the adapters of `step` when resuming."""
    base = checkpoint_dir(checkpoints, BASE_STEP)
    if is_adapter_checkpoint(base):
        raise LoraRunError(f"{base} is an adapter checkpoint; a LoRA run starts from full weights")
    peft_model = wrap_lora(load_model(base, "float32"), section)
    if step != BASE_STEP:
        path = checkpoint_dir(checkpoints, step)
        if not is_adapter_checkpoint(path):
            raise LoraRunError(f"{path} holds full weights: this run was not trained with [trainer.lora]")
        set_peft_model_state_dict(peft_model, load_file(path / ADAPTER_WEIGHTS))
    return peft_model


def adapter_state(
    peft_model: PeftModel, full_state: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """The adapter tensors under peft's saved names; `full_state` is the wrapped model's gathered state
    dict when it is sharded (None: read the live parameters)."""
    prefixed = None if full_state is None else {_PEFT_PREFIX + k: v for k, v in full_state.items()}
    # No embedding layers are adapted (LoraSection refuses them), so peft need not look for a vocabulary change.
    state = get_peft_model_state_dict(peft_model, state_dict=prefixed, save_embedding_layers=False)
    return {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in state.items()}


def save_adapter_checkpoint(
    root: Path,
    step: int,
    peft_model: PeftModel,
    keep: int = 0,
    full_state: dict[str, torch.Tensor] | None = None,
) -> Path:
    """`step_<step>/`: the base checkpoint's files but its weights, the adapter config and weights."""
    if step == BASE_STEP:
        raise LoraRunError(f"step {BASE_STEP} is the base checkpoint; adapters are saved from step 1 on")
    base = checkpoint_dir(root, BASE_STEP)
    path = checkpoint_dir(root, step)
    with atomic_directory(path) as tmp:
        for file in base.iterdir():
            if file.is_file() and not file.name.endswith(_WEIGHT_SUFFIXES):
                shutil.copyfile(file, tmp / file.name)
        peft_model.peft_config["default"].save_pretrained(str(tmp))
        save_file(adapter_state(peft_model, full_state), tmp / ADAPTER_WEIGHTS)
    prune_checkpoints(root, keep, protect=BASE_STEP)
    return path
