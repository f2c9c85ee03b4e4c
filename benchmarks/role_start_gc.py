"""The CPU a role's process spends importing, with the interpreter's default garbage collector settings (the
anchor: a young generation of 700 objects) against swarmrl's (`swarmrl.cli.collect_garbage_less_often`, 20,000),
which every `swarmrl` process sets when the command line starts.

Each arm runs in its own fresh interpreter, the two alternating, `--rounds` times per role: import the command
line (as `swarmrl <role>` does), set the arm's thresholds, import the role's module and everything it imports.
The table gives each arm's median CPU seconds of the process and of the collector (its callbacks), and the
ratio.

    .venv/bin/python benchmarks/role_start_gc.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys

ROLES = {
    "trainer": "swarmrl.trainer.role",
    "validator": "swarmrl.validator.service",
    "worker": "swarmrl.worker.node",
    "coordinator": "swarmrl.coordinator.server.app",
}

ARM = """
import gc, importlib, json, resource, sys, time
spent = [0.0, 0, 0.0]  # collector seconds, full passes, start of the current pass
def timed(phase, info):
    if phase == "start":
        spent[2] = time.process_time()
    else:
        spent[0] += time.process_time() - spent[2]
        spent[1] += info["generation"] == 2
import swarmrl.cli  # sets swarmrl's thresholds
if sys.argv[2] == "default":
    gc.set_threshold(700, 10, 10)
gc.callbacks.append(timed)
importlib.import_module(sys.argv[1])
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime, "collector_s": spent[0], "full_passes": spent[1]}))
"""


def run_arm(module: str, arm: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ARM, module, arm], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(
        f"{platform.processor() or platform.machine()}, python {platform.python_version()}, {args.rounds} rounds"
    )
    print(
        f"{'role':<12} {'default CPU s':>14} {'swarmrl CPU s':>14} {'ratio':>6}   collector s (full passes)"
    )
    for role, module in ROLES.items():
        results: dict[str, list[dict]] = {"default": [], "swarmrl": []}
        for _ in range(args.rounds):
            for arm in results:
                results[arm].append(run_arm(module, arm))
        cpu = {arm: statistics.median(r["cpu_s"] for r in runs) for arm, runs in results.items()}
        collector = {arm: statistics.median(r["collector_s"] for r in runs) for arm, runs in results.items()}
        passes = {arm: statistics.median(r["full_passes"] for r in runs) for arm, runs in results.items()}
        print(
            f"{role:<12} {cpu['default']:>14.2f} {cpu['swarmrl']:>14.2f} {cpu['swarmrl'] / cpu['default']:>6.2f}"
            f"   {collector['default']:.2f} ({passes['default']:.0f}) -> {collector['swarmrl']:.2f}"
            f" ({passes['swarmrl']:.0f})"
        )


if __name__ == "__main__":
    main()
