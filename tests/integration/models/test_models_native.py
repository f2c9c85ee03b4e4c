"""The workers' transformers-free Llama-family models against transformers itself: the same state dict and,
through the paged engine, the same tokens, logprobs and hidden states bit for bit; configs they do not
reproduce exactly are left to transformers; bad configs and weights are named; and a worker's path from
import to a generated batch with proofs never imports transformers' model classes or torch._dynamo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.configs.model import TinyModelSpec
from swarmrl.inference import GenerationRequest, PagedEngine, SamplingParams
from swarmrl.models import (
    ModelLoadError,
    build_tiny_model,
    load_model,
    save_pretrained_atomic,
    train_tokenizer,
)
from swarmrl.models.construction import MODEL_CONSTRUCTION
from swarmrl.models.native import LlamaFamilyForCausalLM, load_native, native_config

torch.set_num_threads(1)

TEXTS = [f"What is {a} plus {b}? The answer is {a + b}." for a in range(20) for b in range(15)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=320)


def tiny(tokenizer, arch: str, **spec) -> torch.nn.Module:
    settings = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, **spec}
    return build_tiny_model(TinyModelSpec(arch=arch, **settings), tokenizer)


def biased_llama(tokenizer) -> torch.nn.Module:
    """A Llama with biases on every projection and MLP (attention_bias, mlp_bias), which the tiny factory
    leaves off."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attention_bias=True,
        mlp_bias=True,
        eos_token_id=tokenizer.eos_token_id,
    )
    with MODEL_CONSTRUCTION, torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
        with torch.no_grad():  # transformers starts biases at zero: give them values the forward must use
            for name, parameter in model.named_parameters():
                if name.endswith(".bias"):
                    parameter.normal_(0, 0.5)
    return model


def generations(model: torch.nn.Module, tokenizer) -> list:
    prompts = [tokenizer.encode(text) for text in TEXTS[:6]]
    requests = [GenerationRequest(ids, seed=100 + i) for i, ids in enumerate(prompts)]
    engine = PagedEngine(model, PagedEngineConfig(block_size=4), eos_token_id=tokenizer.eos_token_id)
    return engine.generate(requests, SamplingParams(max_new_tokens=10, temperature=1.0))


CASES = {
    "qwen2": lambda tok: tiny(tok, "qwen2"),
    "qwen2-untied": lambda tok: tiny(tok, "qwen2", tie_word_embeddings=False),
    "qwen3": lambda tok: tiny(tok, "qwen3", head_dim=24),
    "llama": lambda tok: tiny(tok, "llama"),
    "llama-biased": biased_llama,
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_native_model_is_transformers_model_bit_for_bit(
    tokenizer, tmp_path, case: str, dtype: str
) -> None:
    save_pretrained_atomic(CASES[case](tokenizer), None, tmp_path / "model")
    reference = load_model(tmp_path / "model", dtype).eval()
    native = load_native(tmp_path / "model", dtype)
    assert isinstance(native, LlamaFamilyForCausalLM)
    expected, got = reference.state_dict(), native.state_dict()
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    assert (native.lm_head.weight is native.model.embed_tokens.weight) == reference.config.tie_word_embeddings
    assert torch.equal(native.model.rotary_emb.inv_freq, reference.model.rotary_emb.inv_freq)
    for a, b in zip(generations(reference, tokenizer), generations(native, tokenizer), strict=True):
        assert a.completion_ids == b.completion_ids and a.logprobs == b.logprobs
        assert torch.equal(a.hidden_states, b.hidden_states)


def test_policy_updates_and_the_half_layers_cheat_work_on_it(tokenizer, tmp_path) -> None:
    first, second = tiny(tokenizer, "qwen2"), tiny(tokenizer, "qwen2", seed=1)
    save_pretrained_atomic(first, None, tmp_path / "step_0")
    save_pretrained_atomic(second, None, tmp_path / "step_1")
    native = load_native(tmp_path / "step_0")
    engine = PagedEngine(native, PagedEngineConfig(block_size=4), eos_token_id=tokenizer.eos_token_id)
    engine.load_weights(tmp_path / "step_1", policy_step=1)
    assert torch.equal(native.model.embed_tokens.weight, second.model.embed_tokens.weight)
    assert native.lm_head.weight is native.model.embed_tokens.weight  # tied still, after an in-place load
    native.model.layers = native.model.layers[:1]
    native.config.num_hidden_layers = 1
    assert len(generations(native, tokenizer)) == 6


def _config(tmp_path: Path, tokenizer, **changes) -> Path:
    save_pretrained_atomic(tiny(tokenizer, "llama"), None, tmp_path)
    settings = json.loads((tmp_path / "config.json").read_text())
    settings.update(changes)
    for name, value in changes.items():
        if value is None:
            del settings[name]
    (tmp_path / "config.json").write_text(json.dumps(settings))
    return tmp_path


@pytest.mark.parametrize(
    "changes",
    [
        {"model_type": "mistral"},
        {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}},
        {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
        {"rope_parameters": None, "rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 2.0}},
        {"hidden_act": "gelu"},
        {"use_sliding_window": True},
        {"layer_types": ["sliding_attention", "full_attention"]},
        {"pretraining_tp": 2},
        {"rms_norm_eps": None},
        {"tie_word_embeddings": None},
    ],
    ids=lambda changes: ",".join(changes),
)
def test_configs_it_does_not_reproduce_are_left_to_transformers(tokenizer, tmp_path, changes) -> None:
    assert load_native(_config(tmp_path, tokenizer, **changes)) is None


def test_the_older_flat_rope_keys_are_read(tokenizer, tmp_path) -> None:
    path = _config(tmp_path, tokenizer, rope_parameters=None, rope_theta=20000.0, rope_scaling=None)
    assert load_native(path).config.rope_theta == 20000.0


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"num_hidden_layers": "four"}, "num_hidden_layers"),
        ({"hidden_size": -64}, "hidden_size"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"head_dim": None, "hidden_size": 66}, "num_attention_heads"),
    ],
)
def test_a_config_that_makes_no_model_is_named(tokenizer, tmp_path, changes, named) -> None:
    with pytest.raises(ModelLoadError, match=named):
        load_native(_config(tmp_path, tokenizer, **changes))


def test_unreadable_configs_and_weights_that_do_not_fit_are_named(tokenizer, tmp_path) -> None:
    path = _config(tmp_path / "a", tokenizer)
    weights = path / "model.safetensors"
    state = load_file(weights)
    save_file({name: t for name, t in state.items() if "layers.1.mlp" not in name}, weights)
    with pytest.raises(ModelLoadError, match="missing"):
        load_native(path)
    (path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="config.json"):
        load_native(path)
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_native(tmp_path / "nowhere")
    assert native_config({"model_type": "qwen2"}) is None  # nothing stated: transformers' defaults apply


WORKER_PATH = """
import sys
from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.worker.node import WorkerNode  # the worker's module and everything it imports
from swarmrl.inference.factory import build_engine, engine_model
from swarmrl.inference import GenerationRequest, SamplingParams
from swarmrl.models import load_tokenizer
from swarmrl.toploc import build_proofs_batch
path, config = sys.argv[1], PagedEngineConfig(block_size=4)
tokenizer = load_tokenizer(path)
engine = build_engine(config, engine_model(config, path), eos_token_id=tokenizer.eos_token_id)
assert type(engine.model).__name__ == "LlamaFamilyForCausalLM"
out = engine.generate([GenerationRequest(tokenizer.encode("What is 3 plus 4?"), seed=1)],
                      SamplingParams(max_new_tokens=4, temperature=1.0))
build_proofs_batch([g.hidden_states for g in out])
heavy = ("torch._dynamo", "transformers.modeling_utils", "torch.distributed.tensor")
print(sorted(name for name in sys.modules if name.startswith(heavy)))
"""


def test_a_worker_generates_without_importing_transformers_models_or_dynamo(tokenizer, tmp_path) -> None:
    save_pretrained_atomic(tiny(tokenizer, "qwen2"), tokenizer, tmp_path / "model")
    result = subprocess.run(
        [sys.executable, "-c", WORKER_PATH, str(tmp_path / "model")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
