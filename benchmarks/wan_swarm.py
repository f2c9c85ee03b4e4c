"""The swarm across an emulated WAN against the same swarm on loopback (issue 35): runs `swarmrl demo --wan`
(as root) `--runs` times and prints, per run and as medians, WAN/loopback steps per minute, the broadcast
median over its physical bound, honest files lost and the churn, with the machine's load.

    sudo python benchmarks/wan_swarm.py --runs 2 [section.field=value ...]

Goals: WAN throughput ≥ 0.8 × loopback, broadcast median ≤ 1.5 × the physical bound, 0 honest files lost,
every restarted node back to work within one lease period.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_once(root: Path, overrides: list[str]) -> dict:
    command = [sys.executable, "-m", "swarmrl.cli", "demo", "--wan", f"@{REPO / 'configs' / 'demo-wan.toml'}"]
    done = subprocess.run([*command, f"run.root='{root}'", *overrides], capture_output=True, text=True)
    result_file = root / "demo-wan" / "wan_result.json"
    if not result_file.exists():
        sys.exit(f"demo --wan failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(result_file.read_text())


def summary(result: dict) -> dict:
    lan, wan = result["lan"], result["wan"]
    return {
        "lan_steps_per_min": lan["steps_per_min"],
        "wan_steps_per_min": wan["steps_per_min"],
        "throughput_ratio": wan["steps_per_min"] / lan["steps_per_min"],
        "broadcast_s": wan["broadcast_s"],
        "broadcast_bound_s": wan["broadcast_bound_s"],
        "broadcast_over_bound": (wan["broadcast_s"] or float("nan")) / wan["broadcast_bound_s"],
        "lan_broadcast_s": lan["broadcast_s"],
        "honest_files_lost": wan["honest_files_lost"],
        "units_trained_twice": wan["units_trained_twice"],
        "killed_back": f"{wan['churn']['nodes_killed']}/{wan['churn']['nodes_rejoined']}",
        "back_to_work_s": wan["churn"]["back_to_work_s"],
        "load_1min": {"lan": lan["load_1min"], "wan": wan["load_1min"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("overrides", nargs="*", help="section.field=value overrides of configs/demo-wan.toml")
    args = parser.parse_args()
    rows = []
    for index in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="wan-bench-") as root:
            rows.append(summary(run_once(Path(root), args.overrides)))
        print(f"run {index + 1}: {json.dumps(rows[-1])}", flush=True)
    for key in ("throughput_ratio", "broadcast_over_bound"):
        print(f"median {key}: {statistics.median(row[key] for row in rows):.2f}")


if __name__ == "__main__":
    main()
