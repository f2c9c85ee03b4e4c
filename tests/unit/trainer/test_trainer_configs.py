"""The shipped real-shape configs load through `--dry-run` and carry the shapes and recipes they claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from swarmrl.cli import app
from swarmrl.configs import ConfigError, load_config
from swarmrl.models import Vocabulary, build_tiny_model

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def dry_run(name: str, exit_code: int = 0) -> dict:
    result = CliRunner().invoke(app, ["rl", f"@{CONFIGS / name}", "--dry-run"])
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def test_qwen3_0_6b_config_builds_the_published_shape() -> None:
    resolved = dry_run("qwen3-0.6b-math.toml")
    assert resolved["trainer"]["precision"] == "bf16" and resolved["contract"]["group_size"] == 16
    config = load_config(CONFIGS / "qwen3-0.6b-math.toml")
    with torch.device("meta"):
        model = build_tiny_model(config.model.tiny, Vocabulary(size=config.model.tokenizer_vocab_size))
    total = sum(p.numel() for p in model.parameters())
    # Qwen3-0.6B's model card: 0.6B parameters, 0.44B of them outside the (tied) embedding.
    assert total == 596_049_920
    assert total - model.model.embed_tokens.weight.numel() == 440_467_456
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.head_dim == 128


def test_one_gpu_config_colocates_the_qwen3_0_6b_run() -> None:
    resolved, qwen3 = dry_run("one-gpu.toml"), dry_run("qwen3-0.6b-math.toml")
    assert resolved["trainer"]["colocate"] is True and qwen3["trainer"]["colocate"] is False
    assert resolved["model"] == qwen3["model"] and resolved["tasks"] == qwen3["tasks"]
    assert resolved["engine"]["kind"] == "paged" and 0 < resolved["engine"]["gpu_memory_fraction"] < 0.5
    assert resolved["trainer"]["keep_checkpoints"] == 1


def test_intellect2_config_carries_the_paper_recipe() -> None:
    # Its model and dataset are local files this checkout lacks: the preflight says so and exits 2.
    resolved = dry_run("intellect2-qwq32b.toml", exit_code=2)
    trainer, loss, contract, tasks = (resolved[k] for k in ("trainer", "loss", "contract", "tasks"))
    assert (trainer["prompts_per_step"], contract["group_size"]) == (256, 16)
    assert trainer["optimizer_steps_per_policy_step"] == 8  # 512 samples per optimizer step
    assert (trainer["lr"], trainer["warmup_steps"], trainer["max_grad_norm"]) == (3e-7, 25, 0.1)
    assert (trainer["weight_decay"], trainer["betas"]) == (0.01, [0.9, 0.99])
    assert contract["async_level"] == 2
    assert loss["objective"] == {
        "kind": "grpo_two_sided",
        "epsilon_low": 0.2,
        "epsilon_high": 0.2,
        "delta": 4.0,
    }
    assert loss["normalisation"] == "constant" and loss["max_tokens"] == contract["max_new_tokens"]
    assert tasks["solve_rate_band"] == [0.1, 0.8]
    assert tasks["length"]["mode"] == "exact" and tasks["length"]["alpha"] == 0.0003
    assert tasks["length"]["targets"] == [1000, 2000, 3000, 4000, 5000]
    assert trainer["precision"] == "bf16" and trainer["activation_checkpointing"] is True


def test_a_row_longer_than_a_micro_batch_is_refused_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="pack_length 4096 exceeds micro_batch_tokens 2048"):
        load_config(None, ["trainer.pack_length=4096", "trainer.micro_batch_tokens=2048"])


def test_packed_rows_too_short_for_a_completion_are_refused_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="pack_length 16 cannot hold"):
        load_config(None, ["trainer.pack_length=16", "contract.max_new_tokens=16"])
