"""Asynchronous vs synchronous GRPO on the same config: wall-clock per policy step and final reward.

The trainer and one worker are each pinned to their own core. With async_level = 0 the worker waits for
policy k before it generates the batch of step k, so generation and training alternate; with async_level = 2
it generates step k+1 with policy k while the trainer trains step k. Both runs start from the same SFT policy.

    python benchmarks/async_speedup.py [--steps 20] [--repeats 2] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from swarmrl.configs import load_config
from swarmrl.launch.local import run_local
from swarmrl.launch.prepare import prepare_run

REPO = Path(__file__).resolve().parents[1]


def run_variant(root: Path, name: str, async_level: int, steps: int, start: Path, console: Console) -> dict:
    config = load_config(
        REPO / "configs" / "demo.toml",
        [
            f"run.root='{root}'",
            f"run.name='{name}'",
            "worker.num_workers=1",
            f"contract.async_level={async_level}",
            f"trainer.steps={steps}",
        ],
    )
    target = config.run.directory / "checkpoints" / "step_0"
    target.parent.mkdir(parents=True)
    shutil.copytree(start, target)
    rundir = prepare_run(config)
    started = time.monotonic()
    records = run_local(config, rundir, console=Console(quiet=True), pin_cores=True)
    wall = time.monotonic() - started
    stamps = [r["time"] for r in records]
    # Steady state: the time between the first and the last checkpoint, per step (start-up excluded).
    per_step = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    tail = [r["sampled_reward"] for r in records[-5:]]
    result = {
        "async_level": async_level,
        "wall_s": wall,
        "per_step_s": per_step,
        "train_s": statistics.mean(r["train_seconds"] for r in records),
        "trainer_wait_s": statistics.mean(r["wait_seconds"] for r in records[1:]),
        "final_reward": statistics.mean(tail),
        "final_reward_sd": statistics.stdev(tail),
        "policy_lag": statistics.mean(r["policy_lag"] for r in records),
    }
    console.print(result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2, help="runs per variant, interleaved")
    parser.add_argument("--quick", action="store_true", help="smoke run: 6 steps, one run per variant")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 6, 1
    console = Console()
    with tempfile.TemporaryDirectory(prefix="swarmrl-async-") as tmp:
        root = Path(tmp)
        base = load_config(REPO / "configs" / "demo.toml", [f"run.root='{root}'", "run.name='sft'"])
        start = prepare_run(base).checkpoints / "step_0"
        results: dict[int, list[dict]] = {0: [], 2: []}
        for repeat in range(args.repeats):
            for level in (0, 2):  # interleaved, so drifting machine load hits both alike
                results[level].append(
                    run_variant(root, f"a{level}-r{repeat}", level, args.steps, start, console)
                )
    sync = statistics.median(r["per_step_s"] for r in results[0])
    asyn = statistics.median(r["per_step_s"] for r in results[2])
    console.print(
        f"\n{'variant':<16}{'s/step':>8}{'train s':>9}{'trainer wait s':>16}{'final reward':>14}{'lag':>6}"
    )
    for level, runs in results.items():
        for r in runs:
            console.print(
                f"{'async_level=' + str(level):<16}{r['per_step_s']:>8.2f}{r['train_s']:>9.2f}{r['trainer_wait_s']:>16.2f}"
                f"{r['final_reward']:>9.3f} ± {r['final_reward_sd']:.3f}{r['policy_lag']:>6.2f}"
            )
    console.print(
        f"speedup async_level=2 over async_level=0: {sync / asyn:.2f}x (median s/step {sync:.2f} vs {asyn:.2f})"
    )


if __name__ == "__main__":
    main()
