"""The math reward's agreement with math-verify's own published test suite (the expected verdict of each case).

Corpus: tests/unit/tasks/data/math_verify_suite.json, every parametrized (gold, pred, expected) case of
huggingface/Math-Verify's tests/ (259 distinct). Each prediction goes through the reward's answer region and
`verify_math`, as `MathVerifier.score` does (in this process, no pool). Prints the agreement over all cases and
over the cases whose settings are the reward's own (LaTeX then expressions, precision 6, strict), then every
case where the reward and the suite differ.

    PYTHONPATH=src .venv/bin/python benchmarks/math_suite_agreement.py
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from swarmrl.configs.tasks import AnswerExtractionConfig
from swarmrl.tasks.extraction import answer_text
from swarmrl.tasks.math_verifier import verify_math

SUITE = Path(__file__).resolve().parents[1] / "tests" / "unit" / "tasks" / "data" / "math_verify_suite.json"
REWARD_SETTINGS = {
    "match_types": ["latex", "expr"],
    "precision": 6,
    "strict": True,
    "allow_set_relation_comp": False,
}


def reward(gold: str, prediction: str) -> int:
    text = answer_text(prediction, AnswerExtractionConfig())
    return int(bool(text and text.strip() and verify_math(text, [gold])))


def main() -> None:
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    cases = json.loads(SUITE.read_text())["cases"]
    own = [case for case in cases if all(case[key] == value for key, value in REWARD_SETTINGS.items())]
    verdicts = {id(case): reward(case["gold"], case["pred"]) for case in cases}
    agree = sum(verdicts[id(case)] == case["expected"] for case in cases)
    agree_own = sum(verdicts[id(case)] == case["expected"] for case in own)
    print(
        f"agreement with math-verify's suite: {agree}/{len(cases)}; under the reward's settings: {agree_own}/{len(own)}"
    )
    for case in cases:
        if verdicts[id(case)] != case["expected"]:
            settings = "reward's settings" if case in own else "other settings"
            print(f"  differs ({settings}): {case['sources'][0]}: expected {case['expected']}")


if __name__ == "__main__":
    main()
