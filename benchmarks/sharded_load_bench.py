"""Sharded checkpoint loading (issue 21 item 5): N gloo ranks under torchrun load a safetensors checkpoint
straight into FSDP2 shards, and the same checkpoint the old way (full load on every rank, then shard).

Per rank: whether every local shard, and every buffer, equals the full-load-then-shard result bit for bit;
the fraction of the checkpoint's bytes the rank read (summed slice sizes); and the process's peak RSS after
the sharded load (done first) and after the full load.

    python benchmarks/sharded_load_bench.py [--ranks 2] [--layers 2] [--vocab 32768] [--out r.json]

builds a Qwen2.5-0.5B-shaped model cut to `--layers` layers and `--vocab` tokens (≈52M parameters with the
defaults), saves it in bf16 (as checkpoints ship) and runs the ranks on it; `--checkpoint DIR` loads an existing
directory instead, and several `--checkpoint`s are loaded one after another by the same ranks (one result per
checkpoint and rank; a later checkpoint's peak RSS includes the earlier ones'). The test `tests/integration/trainer/test_trainer_sharded_load.py` runs it on tiny models.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

RSS_UNIT = 1024  # ru_maxrss is in KiB on Linux


def rank_main(checkpoints: list[Path], out: Path) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    results = [rank_result(checkpoint) for checkpoint in checkpoints]
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(results, indent=2))
    dist.barrier()
    dist.destroy_process_group()


def rank_result(checkpoint: Path) -> dict:
    """This rank's sharded load of `checkpoint` against the full load, then shard."""
    import torch
    import torch.distributed as dist

    from swarmrl.configs.trainer import TrainerSection
    from swarmrl.models import load_model
    from swarmrl.trainer.sharded_load import load_sharded
    from swarmrl.trainer.train import build_policy

    rank = dist.get_rank()
    device = torch.device("cpu")
    trainer = TrainerSection()
    sharded_model, _, stats = load_sharded(checkpoint, lambda m: build_policy(m, trainer, device), device)
    rss_sharded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RSS_UNIT
    full_model = load_model(checkpoint, "float32")
    build_policy(full_model, trainer, device)
    rss_full = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RSS_UNIT

    full = dict(full_model.named_parameters())
    mismatched = [
        name
        for name, param in sharded_model.named_parameters()
        if not torch.equal(param.to_local(), full[name].to_local())
    ]
    full_buffers = dict(full_model.named_buffers())
    mismatched += [
        name for name, buffer in sharded_model.named_buffers() if not torch.equal(buffer, full_buffers[name])
    ]
    tied = sharded_model.get_input_embeddings().weight is sharded_model.get_output_embeddings().weight
    return {
        "checkpoint": str(checkpoint),
        "rank": rank,
        "world": dist.get_world_size(),
        "parameters": sum(p.numel() for p in sharded_model.parameters()),
        "compared": len(full) + len(full_buffers),
        "mismatched": mismatched,
        "tied_head_is_embedding": tied,
        "bytes_read": stats.bytes_read,
        "checkpoint_bytes": stats.checkpoint_bytes,
        "fraction_read": stats.fraction,
        "peak_rss_after_sharded_load": rss_sharded,
        "peak_rss_after_full_load": rss_full,
    }


def save_shaped(directory: Path, layers: int, vocab: int) -> Path:
    import torch

    from swarmrl.models.shapes import build_shaped_model

    # The shape's special token ids lie past a cut vocabulary; any ids inside it will do.
    model = build_shaped_model(
        "qwen2.5-0.5b",
        dtype=torch.bfloat16,
        num_hidden_layers=layers,
        vocab_size=vocab,
        bos_token_id=0,
        eos_token_id=1,
    )
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def run_ranks(checkpoints: list[Path], ranks: int, timeout_s: float = 600) -> list[dict]:
    """Start `ranks` gloo ranks on this script under torchrun; their results, by checkpoint then rank."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(ranks),
        ]
        command += [__file__, "--rank-run", "--results", str(out)]
        command += [argument for checkpoint in checkpoints for argument in ("--checkpoint", str(checkpoint))]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={"OMP_NUM_THREADS": "1", **os.environ},
        )
        if result.returncode != 0:
            raise RuntimeError(f"ranks failed ({result.returncode}):\n{result.stderr[-4000:]}")
        by_rank = [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]
        return [by_rank[r][c] for c in range(len(checkpoints)) for r in range(ranks)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=24576)
    parser.add_argument(
        "--checkpoint",
        type=Path,
        action="append",
        help="an existing checkpoint directory (skips building); repeat it to load several in turn",
    )
    parser.add_argument("--out", type=Path, help="write the per-rank results as JSON")
    parser.add_argument("--rank-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_run:
        rank_main(args.checkpoint, args.results)
        return
    with tempfile.TemporaryDirectory() as scratch:
        checkpoints = args.checkpoint or [save_shaped(Path(scratch) / "model", args.layers, args.vocab)]
        results = run_ranks(checkpoints, args.ranks)
    for r in results:
        print(
            f"{Path(r['checkpoint']).name} rank {r['rank']}/{r['world']}: {r['parameters'] / 1e6:.1f}M parameters, read "
            f"{r['bytes_read'] / 2**20:.1f} of {r['checkpoint_bytes'] / 2**20:.1f} MiB ({r['fraction_read']:.3f}); "
            f"{r['compared'] - len(r['mismatched'])}/{r['compared']} tensors bit-identical to full load + shard; "
            f"peak RSS {r['peak_rss_after_sharded_load'] / 2**20:.0f} MiB after the sharded load, "
            f"{r['peak_rss_after_full_load'] / 2**20:.0f} MiB after the full load"
        )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
