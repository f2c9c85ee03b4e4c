"""Bytes SHARDCAST sends per policy step in a LoRA run ([trainer.lora]) against the full checkpoint.

Builds a shipped model shape with random weights (or the demo's tiny model), writes it as step 0, wraps it
with the trainer's LoRA adapters and writes adapter checkpoints for a few steps, each after an update of
Adam's size (every adapter element moves by ±lr, as an Adam step does once its moments settle). Every step is
published through a SHARDCAST origin with deltas on, as the swarm trainer does. Prints, per step, the
adapter checkpoint's bytes and the delta payload a worker holding the previous version downloads, against
the full checkpoint's bytes.

    python benchmarks/lora_bytes.py --shape qwen3-0.6b --r 16
    python benchmarks/lora_bytes.py --shape demo --r 8
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from swarmrl.configs import load_config
from swarmrl.configs.shardcast import OriginConfig
from swarmrl.configs.trainer import LoraSection
from swarmrl.identity import Identity
from swarmrl.models import Vocabulary, build_tiny_model, save_pretrained_atomic
from swarmrl.models.shapes import SHAPES, build_shaped_model
from swarmrl.shardcast.origin import Origin
from swarmrl.steps import checkpoint_dir
from swarmrl.trainer.lora import load_lora_policy, save_adapter_checkpoint

REPO = Path(__file__).resolve().parents[1]


def base_model(shape: str) -> torch.nn.Module:
    if shape == "demo":
        config = load_config(REPO / "configs" / "demo.toml")
        return build_tiny_model(config.model.tiny, Vocabulary(size=config.model.tokenizer_vocab_size))
    return build_shaped_model(shape, dtype=torch.bfloat16)


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="demo", choices=["demo", *SHAPES])
    parser.add_argument("--r", type=int, default=8, help="LoRA rank")
    parser.add_argument("--steps", type=int, default=3, help="adapter checkpoints after step 0")
    parser.add_argument("--lr", type=float, default=1e-4, help="size of each simulated Adam update")
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="lora-bytes-") as tmp:
        root = Path(tmp)
        save_pretrained_atomic(base_model(args.shape), None, checkpoint_dir(root, 0))
        origin = Origin(root, Identity.from_seed(b"l" * 32), "lora-bytes", OriginConfig(delta=True))
        full = origin.publish(None, 0).total_size
        print(f"shape {args.shape}, r {args.r}: full checkpoint (step 0) {full:,} bytes")
        adapter = load_lora_policy(root, 0, LoraSection(enabled=True, r=args.r))
        trainable = sum(p.numel() for p in adapter.parameters() if p.requires_grad)
        print(f"adapter parameters {trainable:,} (fp32)")
        generator = torch.Generator().manual_seed(1)
        for step in range(1, args.steps + 1):
            with torch.no_grad():
                for param in (p for p in adapter.parameters() if p.requires_grad):
                    param.add_(args.lr * torch.randn(param.shape, generator=generator).sign())
            path = save_adapter_checkpoint(root, step, adapter)
            manifest = origin.publish(None, step)
            assert manifest.delta is not None
            sent = sum(entry.payload_size for entry in manifest.delta.entries)
            size = directory_bytes(path)
            print(
                f"step {step}: adapter checkpoint {size:,} bytes ({size / full:.2%} of full), "
                f"delta sent {sent:,} bytes ({sent / full:.2%} of full)"
            )


if __name__ == "__main__":
    main()
