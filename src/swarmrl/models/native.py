"""Llama-family causal LMs (Llama, Qwen2, Qwen3) built from a checkpoint's config.json without transformers,
for the workers' paged engine.

Most of a worker's start-up is imports, and transformers' model classes are the largest: they pull in
torch._dynamo and torch.distributed's tensor code, seconds of CPU before the first unit (the time a restarted
node stays away from work). The paged engine runs the layers' arithmetic itself (`inference.llama_layers`) and
needs only the modules: this tree has transformers' module names, shapes and operations (its norms and rotary
phases computed as transformers computes them), so its state dict is the checkpoint's and its hidden states
equal a transformers model's bit for bit (tests/integration/models/test_models_native.py checks both against
transformers). A config this module does not reproduce exactly — another architecture, scaled or partial
RoPE, sliding windows, a missing setting whose default differs between architectures — is left to
transformers (`load_native` answers None).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from swarmrl.models.adapter import AdapterError, base_checkpoint, is_adapter_checkpoint
from swarmrl.models.checkpoint import WeightLoadError, policy_state
from swarmrl.models.errors import ModelLoadError

ARCHITECTURES = ("llama", "qwen2", "qwen3")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LlamaFamilyConfig:
    """The settings of config.json the modules depend on, under transformers' names (the engines read them
    there). Mutable as a transformers config is: the demo's half-layers cheat edits `num_hidden_layers`."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    projection_bias: bool  # the q, k and v projections carry a bias
    output_bias: bool  # the o projection does
    mlp_bias: bool
    max_position_embeddings: int | None = None
    eos_token_id: int | list[int] | None = None
    layer_types: list[str] | None = None


def plain_llama_layers(config: object) -> bool:
    """Whether `config` (a transformers config, or a config.json's settings as attributes) describes plain
    Llama-family layers — full attention everywhere, SiLU gates, no tensor-parallel slicing — the layers
    `inference.llama_layers` reproduces and this module builds."""
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return (
        getattr(config, "model_type", None) in ARCHITECTURES
        and getattr(config, "hidden_act", "silu") == "silu"
        and all(kind == "full_attention" for kind in layer_types)
        and not getattr(config, "use_sliding_window", False)
        and getattr(config, "pretraining_tp", 1) == 1
    )


def native_config(settings: dict) -> LlamaFamilyConfig | None:
    """`settings` (a parsed config.json) when this module builds exactly what transformers would; else None.
    Raises ModelLoadError for a supported architecture whose numbers make no model."""
    if not plain_llama_layers(SimpleNamespace(**settings)):
        return None
    theta = _default_rope_theta(settings)
    if theta is None or any(settings.get(name) is None for name in ("rms_norm_eps", "tie_word_embeddings")):
        return None
    model_type = settings["model_type"]
    try:
        hidden, heads = _positive(settings, "hidden_size"), _positive(settings, "num_attention_heads")
        kv_heads = _positive(settings, "num_key_value_heads", default=heads)
        if settings.get("head_dim") is None and hidden % heads:
            raise ModelLoadError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
        head_dim = _positive(settings, "head_dim", default=hidden // heads)
        if heads % kv_heads:
            raise ModelLoadError(
                f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
            )
        attention_bias = bool(settings.get("attention_bias", False))
        return LlamaFamilyConfig(
            model_type=model_type,
            vocab_size=_positive(settings, "vocab_size"),
            hidden_size=hidden,
            intermediate_size=_positive(settings, "intermediate_size"),
            num_hidden_layers=_positive(settings, "num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(settings["rms_norm_eps"]),
            rope_theta=theta,
            tie_word_embeddings=bool(settings["tie_word_embeddings"]),
            projection_bias=True if model_type == "qwen2" else attention_bias,
            output_bias=False if model_type == "qwen2" else attention_bias,
            mlp_bias=bool(settings.get("mlp_bias", False)) if model_type == "llama" else False,
            max_position_embeddings=settings.get("max_position_embeddings"),
            eos_token_id=settings.get("eos_token_id"),
            layer_types=settings.get("layer_types"),
        )
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(str(exc)) from exc


def _default_rope_theta(settings: dict) -> float | None:
    """The RoPE base of plain rotary embeddings (transformers 5's rope_parameters, or the older flat keys);
    None for any scaled, partial or unstated kind."""
    rope = settings.get("rope_parameters")
    if rope is None:
        if settings.get("rope_scaling") is not None:
            return None
        rope = {"rope_type": "default", "rope_theta": settings.get("rope_theta")}
    if not isinstance(rope, dict) or rope.get("rope_type", rope.get("type")) != "default":
        return None
    if rope.get("partial_rotary_factor", settings.get("partial_rotary_factor", 1.0)) != 1.0:
        return None
    theta = rope.get("rope_theta")
    return float(theta) if isinstance(theta, int | float) and theta > 0 else None


def _positive(settings: dict, name: str, default: int | None = None) -> int:
    value = settings.get(name)
    value = default if value is None else value
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return value


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32 and scaled in the input's dtype, as transformers' Llama,
    Qwen2 and Qwen3 norms compute it."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    """cos and sin of plain RoPE for given positions, in the dtype of `x`: inverse frequencies
    base^(-2i/d) in float32, phases position · frequency, each frequency used for both halves of a head."""

    inv_freq: torch.Tensor  # a buffer

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        # Computed on the CPU even inside a meta-device block (and moved with the module): float32 whatever
        # the model's dtype, as transformers keeps them.
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float, device="cpu") / head_dim
        self.register_buffer("inv_freq", 1.0 / (theta**exponents), persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        phases = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        angles = torch.cat((phases, phases), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: LlamaFamilyConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        q_size, kv_size = (
            config.num_attention_heads * self.head_dim,
            config.num_key_value_heads * self.head_dim,
        )
        self.q_proj = nn.Linear(config.hidden_size, q_size, bias=config.projection_bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_size, bias=config.projection_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_size, bias=config.projection_bias)
        self.o_proj = nn.Linear(q_size, config.hidden_size, bias=config.output_bias)
        if config.model_type == "qwen3":  # each head normalised before the rotation
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)


class GatedMLP(nn.Module):
    def __init__(self, config: LlamaFamilyConfig) -> None:
        super().__init__()
        size, inner, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = nn.Linear(size, inner, bias=bias)
        self.up_proj = nn.Linear(size, inner, bias=bias)
        self.down_proj = nn.Linear(inner, size, bias=bias)


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaFamilyConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = GatedMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Backbone(nn.Module):
    def __init__(self, config: LlamaFamilyConfig) -> None:
        super().__init__()
        # Built on the meta device and filled from the checkpoint: no initialisation to spend (nor meta's
        # normal_, which imports torch._dynamo).
        self.embed_tokens = nn.Embedding(
            config.vocab_size, config.hidden_size, _weight=torch.empty(config.vocab_size, config.hidden_size)
        )
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta)


class LlamaFamilyForCausalLM(nn.Module):
    """Modules only: the paged engine runs them (`inference.paged.model`); there is no forward of its own."""

    def __init__(self, config: LlamaFamilyConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def get_decoder(self) -> Backbone:
        return self.model

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head


def checked_model_dir(directory: Path, dtype: str) -> torch.dtype:
    """The torch dtype `dtype` names, once `directory` is known to hold a config.json (ModelLoadError else)."""
    if not (directory / "config.json").is_file():
        raise ModelLoadError(f"{directory}: no config.json, not a model directory")
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def load_native(
    path: str | Path, dtype: str = "float32", device: str | torch.device = "cpu"
) -> LlamaFamilyForCausalLM | None:
    """The checkpoint at `path` (full weights or a LoRA adapter, merged as `models.checkpoint` merges it) as a
    `LlamaFamilyForCausalLM`, or None when its config needs transformers. Bad weights raise ModelLoadError."""
    path = Path(path)
    try:
        config_dir = base_checkpoint(path) if is_adapter_checkpoint(path) else path
    except AdapterError as exc:
        raise ModelLoadError(str(exc)) from exc
    torch_dtype = checked_model_dir(config_dir, dtype)
    settings_file = config_dir / "config.json"
    try:
        settings = json.loads(settings_file.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{settings_file}: unreadable: {exc}") from exc
    try:
        config = native_config(settings) if isinstance(settings, dict) else None
    except ModelLoadError as exc:
        raise ModelLoadError(f"{settings_file}: {exc}") from exc
    if config is None:
        return None
    with torch.device("meta"):
        model = LlamaFamilyForCausalLM(config)
    _materialise(model, torch.device(device), torch_dtype)
    try:
        model.load_state_dict(policy_state(model, path), strict=False)
    except WeightLoadError as exc:
        raise ModelLoadError(f"{path}: {exc}") from exc
    return model.eval()


def _materialise(model: LlamaFamilyForCausalLM, device: torch.device, dtype: torch.dtype) -> None:
    """Give every parameter of a meta-device `model` uninitialised storage (every one is then copied from the
    checkpoint), and move its rotary frequencies (computed on the CPU at construction) to `device`.
    `Module.to_empty` would go through torch's reference ops, whose import costs more than the whole load."""
    for module in model.modules():
        for name, parameter in list(module.named_parameters(recurse=False)):
            storage = torch.empty(parameter.shape, dtype=dtype, device=device)
            setattr(module, name, nn.Parameter(storage, requires_grad=parameter.requires_grad))
    model.tie_weights()
    rotary = model.model.rotary_emb
    rotary.inv_freq = rotary.inv_freq.to(device)
