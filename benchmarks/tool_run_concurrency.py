"""Tool runs one at a time vs several at once (`env.max_concurrent_steps`), in one process.

Each run starts a fresh bubblewrap sandbox (the Python tool's `run_tool`, memoisation defeated by distinct
programs). Prints the wall time of N runs at each concurrency and its ratio to one at a time. On a machine whose
cores are already busy (a trainer and workers beside it) the ratio says little: there the demo's own step time
is the measure (benchmarks/RESULTS.md: this script's row and the tool demo's).

    .venv/bin/python benchmarks/tool_run_concurrency.py [--runs 40] [--concurrency 1,2,4,8]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from swarmrl.configs.envs import PythonToolEnvConfig
from swarmrl.envs.python_tool import run_tool
from swarmrl.tasks.sandbox import SandboxLimits, sandbox_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--concurrency", default="1,2,4,8")
    args = parser.parse_args()
    sandbox = PythonToolEnvConfig(kind="python_tool").sandbox
    plan, limits = sandbox_plan(sandbox), SandboxLimits.from_config(sandbox)
    run_tool("print('warm-up')", plan, limits, 64)
    baseline = None
    for workers in (int(c) for c in args.concurrency.split(",")):
        programs = [f"print({workers} * 1000 + {i})" for i in range(args.runs)]
        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            outputs = list(pool.map(lambda code: run_tool(code, plan, limits, 64), programs))
        seconds = time.perf_counter() - started
        assert all(str(workers * 1000 + i) in out for i, out in enumerate(outputs)), outputs[:2]
        baseline = baseline or seconds
        print(
            f"{workers} at a time: {args.runs} tool runs in {seconds:.2f} s ({baseline / seconds:.2f}x one at a time)"
        )


if __name__ == "__main__":
    main()
