"""Load any HF causal LM from a local directory; save a model and its tokenizer atomically."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase
from transformers.initialization import no_init_weights
from transformers.utils import logging as hf_logging

from swarmrl.errors import writing
from swarmrl.models.adapter import AdapterError, base_checkpoint, is_adapter_checkpoint
from swarmrl.models.checkpoint import policy_state
from swarmrl.models.construction import MODEL_CONSTRUCTION
from swarmrl.models.errors import ModelLoadError
from swarmrl.models.native import checked_model_dir

# Checkpoints are read and written every policy step; per-shard progress bars would flood the logs.
hf_logging.disable_progress_bar()


def load_model(
    path: str | Path, dtype: str = "float32", device: str = "cpu", attn_implementation: str = "sdpa"
) -> PreTrainedModel:
    """A causal LM from a local HF directory (safetensors); never reaches for a hub.

    A LoRA adapter checkpoint loads as its base model with the adapter merged in (`swarmrl.models.adapter`).
    """
    path = Path(path)
    if is_adapter_checkpoint(path):
        try:
            model = load_model(base_checkpoint(path), dtype, device, attn_implementation)
        except AdapterError as exc:
            raise ModelLoadError(str(exc)) from exc
        # The engines' own reader and checks: one merge path for every reader.
        model.load_state_dict(policy_state(model, path), strict=False)
        return model
    torch_dtype = checked_model_dir(path, dtype)
    with MODEL_CONSTRUCTION:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch_dtype, local_files_only=True, attn_implementation=attn_implementation
        )
    # transformers wraps `to` with functools.wraps(nn.Module.to), which typeshed types without its self.
    return model.to(device)  # type: ignore[arg-type]


def model_skeleton(
    path: str | Path,
    dtype: str = "float32",
    device: str | torch.device = "cpu",
    attn_implementation: str = "sdpa",
) -> PreTrainedModel:
    """The model `load_model` would build from `path`'s config.json — same modules, dtypes, buffers and tied
    head — with its weights left uninitialised and no weight file read: for an engine whose every parameter
    is then copied in from a trainer in the same process."""
    path = Path(path)
    torch_dtype = checked_model_dir(path, dtype)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with MODEL_CONSTRUCTION, no_init_weights():
        model = AutoModelForCausalLM.from_config(
            config, dtype=torch_dtype, attn_implementation=attn_implementation
        )
        model.tie_weights()  # from_pretrained ties the head after loading; from_config under no_init does not
    return model.to(device)


def save_pretrained_atomic(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    path: str | Path,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write to a temporary sibling, then rename: a reader sees the whole directory or none of it."""
    with atomic_directory(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return Path(path)


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A temporary sibling of `path` to fill; when the block ends without an error it replaces `path` in
    one rename, so a reader sees the whole directory or none of it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        with writing(path):
            tmp.mkdir(parents=True)
            yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written directory only takes space
        raise
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def policy_vocab_size(checkpoint: str | Path) -> int:
    """Token ids must index the model's embedding; the tokenizer may know more ids than the model has."""
    return AutoConfig.from_pretrained(checkpoint, local_files_only=True).vocab_size
