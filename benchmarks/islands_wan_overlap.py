"""Trainer islands across the emulated WAN, their merges blocking vs overlapped, in one invocation (issue 35).

The islands of configs/demo-islands.toml (70 steps, H = 10, int8) with island 0 in us and island 1 in asia
(250 ms ± 10 ms, 1% loss, asia's 20 Mbit/s link), the lighthouse in us: the `wan` arm of
`swarmrl demo --islands --wan`, run with `islands.overlap_steps = 0` (the anchor: every merge blocks its
trainer) and with `--overlap-steps` (the merge's communication in the background), alternating for `--rounds`
rounds in one emulated world. Prints each arm's figures and the ratios overlapped / blocking.

    sudo .venv/bin/python benchmarks/islands_wan_overlap.py [--rounds 1] [--overlap-steps 3] [--root /tmp/iwo]

Needs root (network namespaces, tc, nftables), like `demo --wan`.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rich.console import Console

from swarmrl.configs import load_config
from swarmrl_lab.wan import netns
from swarmrl_lab.wan.islands import WanIslandsNetwork, island_machines, run_arm
from swarmrl_lab.wan.world import World

REPO = Path(__file__).resolve().parents[1]
FIGURES = [
    ("utilisation", "trainer utilisation (lowest island)"),
    ("utilisation_after_first_merge", "… after the first merge"),
    ("merge_blocked_seconds_median", "later merges, trainer blocked, median (s)"),
    ("merge_seconds_median", "later merges, median (s)"),
    ("first_merge_seconds", "first merge (s)"),
    ("steps_per_min", "steps per minute (mean of islands)"),
    ("heldout_after", "held-out accuracy after"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--overlap-steps", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path("/tmp/islands-wan-overlap"))
    args = parser.parse_args()
    netns.check_available()
    console = Console()
    configs = {
        k: load_config(
            REPO / "configs" / "demo-islands.toml",
            [f"run.root='{args.root}'", "run.name='bench'", f"islands.overlap_steps={k}"],
        )
        for k in (0, args.overlap_steps)
    }
    base = configs[0]
    regions = [base.wan.island_region(i) for i in range(base.islands.count)]
    arms: dict[int, list[dict]] = {k: [] for k in configs}
    with World(base.wan, island_machines(base), [], base.run.directory / "wan-net") as world:
        for round_index in range(args.rounds):
            order = list(configs) if round_index % 2 == 0 else list(configs)[::-1]
            for k in order:
                console.rule(f"round {round_index + 1}: overlap_steps = {k}")
                arms[k].append(run_arm(configs[k], f"overlap{k}", console, regions, WanIslandsNetwork(world)))
    (args.root / "islands_wan_overlap.json").write_text(
        json.dumps({str(k): v for k, v in arms.items()}, indent=2)
    )
    print(
        f"\nislands in {regions}, H = {base.islands.merge_every}, {args.rounds} round(s), medians over rounds"
    )
    print(f"{'figure':44s} {'blocking':>10s} {'overlap ' + str(args.overlap_steps):>10s} {'ratio':>7s}")
    for key, label in FIGURES:
        blocking = statistics.median(a[key] for a in arms[0])
        overlapped = statistics.median(a[key] for a in arms[args.overlap_steps])
        ratio = f"{overlapped / blocking:.2f}x" if blocking else "-"
        print(f"{label:44s} {blocking:10.3f} {overlapped:10.3f} {ratio:>7s}")


if __name__ == "__main__":
    main()
