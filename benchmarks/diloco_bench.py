"""DiLoCo vs DDP on 4 local gloo workers: eval loss, traffic, compute utilisation, peak bandwidth.

Anchor: torch DistributedDataParallel (all-reduce of fp32 gradients every step) on the same tiny byte-level
Qwen2, the same data shards, steps and per-worker batch. swarmrl: DiLoCo at H = 50, 100, 250 with fp32,
fp16 and int8 pseudo-gradients; then both under a simulated 100 Mbit/s, 50 ms link, plus Streaming DiLoCo.

    .venv/bin/python benchmarks/diloco_bench.py            # full grid (~10 min on a shared 2-core CPU)
    .venv/bin/python benchmarks/diloco_bench.py --quick    # H = 100, 250 with fp32 and int8 only
"""

from __future__ import annotations

import argparse
import time

from swarmrl.configs.diloco import (
    ByteCorpusConfig,
    DiLoCoConfig,
    InnerOptimizerConfig,
    OuterOptimizerConfig,
    ThrottleConfig,
    TinyModelConfig,
)
from swarmrl.diloco.launcher import launch_many
from swarmrl.diloco.reports import RunReport


def _base(total_steps: int, workers: int) -> dict[str, object]:
    return {
        "workers": workers,
        "total_steps": total_steps,
        "model": TinyModelConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2),
        "data": ByteCorpusConfig(max_bytes=3_000_000, seq_len=64, batch_size=4, eval_batches=16),
    }


def _row(report: RunReport, ddp: RunReport) -> str:
    s = report.summary()
    ratio = ddp.bytes_sent_per_worker / max(report.bytes_sent_per_worker, 1)
    loss_gap = (report.eval_loss - ddp.eval_loss) / ddp.eval_loss * 100
    return (
        f"| {s['run']} | {s['eval_loss']:.4f} | {loss_gap:+.2f}% | {s['bytes_per_worker']:,} | {ratio:,.0f}x "
        f"| {s['peak_bytes_per_sync']:,} | {s['compute_utilisation']:.1%} | {s['wall_s']} |"
    )


HEADER = (
    "| run | eval loss | vs DDP | bytes sent / worker | less traffic than DDP | peak bytes / sync "
    "| compute utilisation | train wall s |\n|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="H = 100 and 250, fp32 and int8 only")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=500, help="inner steps per worker (>= 2 x 250)")
    parser.add_argument("--windows", type=int, nargs="+", help="H values to run (default 50 100 250)")
    parser.add_argument("--codecs", nargs="+", help="codecs to run (default fp32 fp16 int8)")
    parser.add_argument("--fast-only", action="store_true", help="skip the throttled-link runs")
    parser.add_argument(
        "--outer-lrs", type=float, nargs="+", default=[0.7], help="outer Nesterov learning rates"
    )
    parser.add_argument(
        "--outer-momenta", type=float, nargs="+", default=[0.9], help="outer Nesterov momenta"
    )
    parser.add_argument(
        "--inner-lr",
        type=float,
        default=2e-3,
        help="inner AdamW rate, DDP's too (2e-3: near DDP's best here)",
    )
    parser.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    parser.add_argument("--warmup-steps", type=int, default=25, help="linear warmup of the inner rate")
    args = parser.parse_args()
    base = _base(args.steps, args.workers)
    base["inner"] = InnerOptimizerConfig(
        lr=args.inner_lr, schedule=args.schedule, warmup_steps=args.warmup_steps
    )
    windows = args.windows or ([100, 250] if args.quick else [50, 100, 250])
    codecs = args.codecs or (["fp32", "int8"] if args.quick else ["fp32", "fp16", "int8"])
    started = time.perf_counter()

    # One set of worker processes runs every config back to back (saves start-up per run).
    fast = launch_many(
        [DiLoCoConfig(mode="ddp", **base)]
        + [
            DiLoCoConfig(inner_steps=w, codec=c, outer=OuterOptimizerConfig(lr=lr, momentum=m), **base)
            for w in windows
            for c in codecs
            for lr in args.outer_lrs
            for m in args.outer_momenta
        ]
    )
    ddp = fast[0]
    print(
        f"model: {ddp.parameters:,} parameters; {args.workers} workers x {args.steps} steps x batch 4 x 64 tokens; "
        f"inner AdamW lr {args.inner_lr:g}, {args.schedule} after {args.warmup_steps} warmup steps"
    )
    print("\n## Fast local link (gloo on 127.0.0.1)\n")
    print(HEADER)
    for report in fast:
        print(_row(report, ddp))

    if args.fast_only:
        print(f"\nbench wall time: {time.perf_counter() - started:.0f} s")
        return
    throttle = ThrottleConfig(enabled=True, bandwidth_mbit=100.0, latency_ms=50.0)
    slow = launch_many(
        [DiLoCoConfig(mode="ddp", throttle=throttle, **base)]
        + [
            DiLoCoConfig(
                inner_steps=100, codec="int8", fragments=f, overlap_steps=o, throttle=throttle, **base
            )
            for f, o in [(1, 0), (4, 5)]
        ]
    )
    print("\n## Throttled link (100 Mbit/s, 50 ms per collective); ratios vs the fast-link DDP\n")
    print(HEADER)
    for report in slow:
        print(_row(report, ddp))
    print(f"\nbench wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
