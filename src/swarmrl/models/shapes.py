"""Real model shapes, offline: the published `config.json` fields of Qwen2.5-0.5B/1.5B/7B (Instruct),
Qwen3-0.6B/1.7B/8B and QwQ-32B, shipped in `shapes/`, built with random weights and no download.

Shapes, not weights, decide throughput and memory, so benchmarks and sizing run on these. A real checkpoint
directory (`save_pretrained` layout) loads through `swarmrl.models.load_model` as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from swarmrl.models.construction import MODEL_CONSTRUCTION

SHAPES_DIR = Path(__file__).parent / "shapes"
SHAPES = tuple(sorted(path.stem for path in SHAPES_DIR.glob("*.json")))


def shape_config(name: str, **overrides: object) -> PretrainedConfig:
    """The HF config of a shipped shape; `overrides` change fields (e.g. num_hidden_layers for a cut-down copy)."""
    if name not in SHAPES:
        raise ValueError(f"unknown model shape {name!r}; shipped: {', '.join(SHAPES)}")
    fields = json.loads((SHAPES_DIR / f"{name}.json").read_text())
    fields.update(overrides)
    model_type = fields.pop("model_type")
    fields.pop("torch_dtype", None)
    return AutoConfig.for_model(model_type, **fields)


def build_shaped_model(
    name: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
    **overrides: object,
) -> PreTrainedModel:
    """A randomly initialised model of a shipped shape, created directly on `device` in `dtype`."""
    config = shape_config(name, **overrides)
    with MODEL_CONSTRUCTION, torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        if torch.device(device).type == "cuda":
            torch.cuda.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def parameter_count(name: str) -> tuple[int, int]:
    """(all parameters, parameters outside the embedding and LM head) of a shape, counted without weights."""
    with MODEL_CONSTRUCTION, torch.device("meta"):
        model = AutoModelForCausalLM.from_config(shape_config(name))
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(
        p.numel()
        for p in {id(p): p for p in (model.get_input_embeddings().weight, model.lm_head.weight)}.values()
    )
    return total, total - embedding
