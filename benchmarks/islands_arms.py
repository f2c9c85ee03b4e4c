"""Trainer islands vs one trainer and vs syncing every step: held-out accuracy after RL and traffic between islands.

Every arm starts from the same SFT policy of configs/demo-islands.toml, trains the same number of policy steps
and sees the same samples per step in total (32 prompts × 8 completions, split evenly over the islands):
  (a) one island with all 4 workers (no merges: the anchor, plain async GRPO);
  (b) two islands × 2 workers averaged after every policy step (fp32, outer lr 1, no momentum);
  (c) two islands × 2 workers merged every H = 10 and H = 25 steps with int8 pseudo-gradients, with DiLoCo's
      outer Nesterov step (lr 0.7, momentum 0.9: c10, c25) and with plain averaging (lr 1, no momentum: c10avg,
      c25avg, the setting of configs/demo-islands.toml).

    .venv/bin/python benchmarks/islands_arms.py [--steps 50] [--arms a,b,c10,c25,c10avg,c25avg]   # ~4-6 min per arm here
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from swarmrl.configs import load_config
from swarmrl.islands.demo import run_islands_demo

NESTEROV = ["islands.outer_lr=0.7", "islands.outer_momentum=0.9"]  # DiLoCo's pre-training setting
AVERAGING = ["islands.outer_lr=1.0", "islands.outer_momentum=0.0"]
ARMS: dict[str, list[str]] = {
    "a": [
        "islands.count=1",
        "worker.num_workers=4",
        "trainer.prompts_per_step=32",
        "islands.merge_every=100000",
    ],
    "b": [
        "islands.merge_every=1",
        "islands.codec='fp32'",
        *AVERAGING,
    ],
    "c10": ["islands.merge_every=10", "islands.codec='int8'", *NESTEROV],
    "c25": ["islands.merge_every=25", "islands.codec='int8'", *NESTEROV],
    # The same merges with plain averaging of the policies (outer lr 1, no momentum): the demo's setting.
    "c10avg": ["islands.merge_every=10", "islands.codec='int8'", *AVERAGING],
    "c25avg": ["islands.merge_every=25", "islands.codec='int8'", *AVERAGING],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--steps", type=int, default=50, help="policy steps per arm (a multiple of 10 and 25)"
    )
    parser.add_argument("--arms", default="a,b,c10,c25")
    parser.add_argument("--root", default="runs/islands-arms")
    args = parser.parse_args()
    console = Console()
    rows = []
    for arm in args.arms.split(","):
        config = load_config(
            "configs/demo-islands.toml",
            [f"run.root='{args.root}'", f"run.name='arm-{arm}'", f"trainer.steps={args.steps}", *ARMS[arm]],
        )
        result = run_islands_demo(config, console)
        rows.append(
            {
                "arm": arm,
                **{k: result[k] for k in ("islands", "merge_every", "codec", "wall_seconds")},
                "before": result["heldout_before"]["accuracy"],
                "after": result["heldout_after_merged"]["accuracy"],
                "bytes_between_islands": result["bytes_between_islands"],
            }
        )
        Path(args.root, "arms.json").write_text(json.dumps(rows, indent=2))
    for row in rows:
        console.print(
            f"arm {row['arm']:>3}: {row['islands']} island(s), H={row['merge_every']}, {row['codec']}: "
            f"held-out {100 * row['before']:.1f}% -> {100 * row['after']:.1f}%, "
            f"{row['bytes_between_islands'] / 1e6:.1f} MB between islands, {row['wall_seconds']:.0f} s"
        )


if __name__ == "__main__":
    main()
