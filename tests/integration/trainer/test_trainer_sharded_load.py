"""Loading a checkpoint straight into FSDP2 shards (`trainer/sharded_load.py`): bit-identical to loading the
whole model and sharding it, with each rank reading only its own part of the checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from swarmrl.models import ModelLoadError, load_model
from swarmrl.models.shapes import build_shaped_model
from swarmrl.trainer.sharded_load import empty_model, load_sharded

_SCRIPT = Path(__file__).parents[3] / "benchmarks" / "sharded_load_bench.py"
# Odd sizes: FSDP2 splits dim 0 unevenly (vocab 999 → 500 + 499 rows), as real shapes often are.
SHAPE = dict(
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    vocab_size=999,
    bos_token_id=0,
    eos_token_id=1,
)


def checkpoint(path: Path, **overrides) -> Path:
    """A small Qwen2-shaped model saved in bf16, as checkpoints ship (the trainer loads fp32 masters)."""
    build_shaped_model("qwen2.5-0.5b", dtype=torch.bfloat16, **{**SHAPE, **overrides}).save_pretrained(path)
    return path


@pytest.mark.slow
def test_two_gloo_ranks_load_their_shards_bit_identically_reading_half_each(tmp_path):
    # A tied and an untied head, loaded in turn by the same two ranks: one torchrun, not one per checkpoint.
    models = {
        tied: checkpoint(tmp_path / f"model-tied-{tied}", tie_word_embeddings=tied) for tied in (True, False)
    }
    out = tmp_path / "ranks.json"
    subprocess.run(
        [
            sys.executable,
            str(_SCRIPT),
            *(f"--checkpoint={model}" for model in models.values()),
            "--out",
            str(out),
        ],
        check=True,
        timeout=600,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    results = json.loads(out.read_text())
    for tied, model in models.items():
        ranks = [r for r in results if r["checkpoint"] == str(model)]
        assert [r["rank"] for r in ranks] == [0, 1], (tied, results)
        stored = sum(t.numel() * t.element_size() for t in load_file(model / "model.safetensors").values())
        for r in ranks:
            # Every parameter and buffer (rotary inv_freq too) equals the full load's shard on this rank.
            assert r["mismatched"] == [] and r["compared"] > 20, (tied, r)
            assert r["tied_head_is_embedding"] is tied
            assert r["checkpoint_bytes"] == stored, (tied, r)
            assert 0.45 < r["fraction_read"] < 0.55, (tied, r)
        # Between them the ranks read the whole checkpoint, each row once.
        assert sum(r["bytes_read"] for r in ranks) == stored, tied


def test_one_process_reads_the_whole_checkpoint_like_load_model(tmp_path):
    path = checkpoint(tmp_path / "model")
    model, root, stats = load_sharded(path, lambda m: m, torch.device("cpu"))
    assert root is model and stats.fraction == 1.0
    reference = load_model(path, "float32")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    for (name, got), (_, want) in zip(
        model.state_dict().items(), reference.state_dict().items(), strict=True
    ):
        assert got.dtype == torch.float32 and torch.equal(got, want), name
    for (name, got), (_, want) in zip(model.named_buffers(), reference.named_buffers(), strict=True):
        assert torch.equal(got, want), name


def test_the_empty_model_holds_no_parameter_memory_but_real_buffers(tmp_path):
    model = empty_model(checkpoint(tmp_path / "model"))
    assert all(p.is_meta for p in model.parameters())
    assert all(not b.is_meta for b in model.buffers()) and any(True for _ in model.buffers())
    # The constructor's patch is undone: modules built afterwards are ordinary.
    assert not torch.nn.Linear(2, 2).weight.is_meta


def test_a_checkpoint_missing_a_parameter_names_it(tmp_path):
    path = checkpoint(tmp_path / "model")
    weights = load_file(path / "model.safetensors")
    del weights["model.norm.weight"]
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="model.norm.weight"):
        load_sharded(path, lambda m: m, torch.device("cpu"))


def test_a_checkpoint_of_another_shape_is_refused(tmp_path):
    path = checkpoint(tmp_path / "model")
    other = checkpoint(tmp_path / "other", intermediate_size=128)
    (path / "model.safetensors").write_bytes((other / "model.safetensors").read_bytes())
    with pytest.raises(ModelLoadError, match="mlp"):
        load_sharded(path, lambda m: m, torch.device("cpu"))
