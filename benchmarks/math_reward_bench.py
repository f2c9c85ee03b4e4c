"""Math reward on math-verify's own published test suite: agreement and per-call latency, swarmrl vs the anchor.

Cases: tests/unit/tasks/data/math_verify_suite.json (every parametrized case of huggingface/Math-Verify
tests/, one row per distinct (gold, pred, expected)).
Anchor: math-verify alone, `verify(parse(gold), parse(pred))` in this process under the reward's settings
(LaTeX + expressions, \\boxed{} first, float_rounding 6, strict), its signal timeouts off.
swarmrl: `MathVerifier.score(task, completion)`, i.e. answer region + one call into its wall-clock-limited
process pool (one worker; the pipe round trip is part of the figure).
Prints how many cases each agrees with the suite's expected verdict, how many the two agree on, and the
median / p99 latency per call over `--rounds` passes (each pass in a fresh shuffled order).

    PYTHONPATH=src .venv/bin/python benchmarks/math_reward_bench.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import time
from pathlib import Path

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from swarmrl.configs.tasks import MathRewardConfig
from swarmrl.tasks.math_verifier import MathVerifier
from swarmrl.tasks.task import Task

SUITE = Path(__file__).resolve().parents[1] / "tests/unit/tasks/data/math_verify_suite.json"


def math_verify_alone(gold: str, pred: str) -> int:
    configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return int(
        verify(
            parse(gold, configs, parsing_timeout=None),
            parse(pred, configs, parsing_timeout=None),
            float_rounding=6,
            timeout_seconds=None,
        )
    )


def timed(fn, *args) -> tuple[float, float]:
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    cases = json.loads(SUITE.read_text())["cases"]
    verifier = MathVerifier(MathRewardConfig(timeout_seconds=30.0, num_workers=1))
    verifier.score(Task("w", "q", "math", {"ground_truth": "1"}), r"\boxed{1}")  # start and warm the worker
    swarmrl_s: list[float] = []
    anchor_s: list[float] = []
    verdicts: dict[int, tuple[int, int]] = {}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(range(len(cases)))
        rng.shuffle(order)
        for i in order:
            case = cases[i]
            task = Task("m", "q", "math", {"ground_truth": case["gold"]})
            reward, seconds = timed(verifier.score, task, case["pred"])
            swarmrl_s.append(seconds)
            alone, seconds = timed(math_verify_alone, case["gold"], case["pred"])
            anchor_s.append(seconds)
            verdicts[i] = (int(reward), alone)
    verifier.close()
    expected = [case["expected"] for case in cases]
    print(
        f"cases: {len(cases)} distinct ({sum(len(c['sources']) for c in cases)} parametrized in Math-Verify tests/)"
    )
    print(
        f"agree with the suite's expected verdict: swarmrl {sum(verdicts[i][0] == e for i, e in enumerate(expected))}"
        f", math-verify alone {sum(verdicts[i][1] == e for i, e in enumerate(expected))}"
    )
    print(f"swarmrl reward == math-verify alone: {sum(r == a for r, a in verdicts.values())}")
    for name, values in (
        ("swarmrl MathVerifier.score", swarmrl_s),
        ("math-verify alone (in-process)", anchor_s),
    ):
        print(
            f"{name:32s} median {statistics.median(values) * 1e3:7.2f} ms  p99 {percentile(values, 0.99) * 1e3:7.2f} ms"
            f"  ({len(values)} calls)"
        )
    print(
        f"ratio swarmrl/anchor: median {statistics.median(swarmrl_s) / statistics.median(anchor_s):.2f}x, "
        f"p99 {percentile(swarmrl_s, 0.99) / percentile(anchor_s, 0.99):.2f}x"
    )


if __name__ == "__main__":
    main()
