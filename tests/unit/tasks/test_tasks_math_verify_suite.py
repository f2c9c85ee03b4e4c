"""The math reward against math-verify's own published test suite (data/math_verify_suite.json: every
parametrized (gold, pred, expected) case of huggingface/Math-Verify tests/, reproduced unchanged).

Each case runs through `MathVerifier.score` (pool worker, answer region, gold handling) and must give
math-verify's own verdict, parse + verify called directly under the reward's settings. Where the suite's test
compares under those same settings, that verdict must also be the suite's expected one.
"""

import json
import logging
from pathlib import Path

import pytest

from swarmrl.configs.tasks import MathRewardConfig
from swarmrl.tasks.math_verifier import MathVerifier
from swarmrl.tasks.task import Task

SUITE = json.loads((Path(__file__).parent / "data" / "math_verify_suite.json").read_text())["cases"]
REWARD_SETTINGS = {
    "match_types": ["latex", "expr"],
    "precision": 6,
    "strict": True,
    "allow_set_relation_comp": False,
}


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(MathRewardConfig(timeout_seconds=20.0, num_workers=1))
    yield v
    v.close()


def math_verify_alone(gold: str, pred: str) -> int:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    gold_parsed = parse(gold, configs, parsing_timeout=None)
    pred_parsed = parse(pred, configs, parsing_timeout=None)
    return int(verify(gold_parsed, pred_parsed, float_rounding=6, timeout_seconds=None))


def test_suite_data_is_the_whole_published_suite():
    assert len(SUITE) == 259  # distinct (gold, pred, expected) rows
    assert sum(len(case["sources"]) for case in SUITE) == 269  # parametrized cases in Math-Verify's tests/
    assert sum(case["expected"] == 0 for case in SUITE) >= 30  # negatives: a reward that says 1 fails them


@pytest.mark.parametrize("case", SUITE, ids=[case["sources"][0] for case in SUITE])
def test_reward_gives_math_verifys_own_verdict(verifier, case):
    reward = verifier.score(Task("m", "q", "math", {"ground_truth": case["gold"]}), case["pred"])
    alone = math_verify_alone(case["gold"], case["pred"])
    assert reward == alone
    if all(case[key] == value for key, value in REWARD_SETTINGS.items()):
        assert reward == case["expected"]
