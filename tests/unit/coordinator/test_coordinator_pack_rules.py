"""The coordinator's rules for community packs, as pure functions: which lane a check may run on, when a pack
retires, when two judges disagree."""

from __future__ import annotations

from swarmrl.configs.task_packs import AdmissionBudgetConfig, RetirementConfig
from swarmrl.coordinator.rules.pack_budget import EARNED, NEWCOMERS, choose_lane
from swarmrl.coordinator.rules.pack_observations import scores_differ
from swarmrl.coordinator.rules.pack_retirement import PackHealth, retirement_of

BUDGET = AdmissionBudgetConfig(newcomer_seconds_per_hour=900.0)
RETIREMENT = RetirementConfig(
    window_groups=64, min_groups=16, min_informative_share=0.1, max_failure_share=0.02
)


def test_an_author_with_enough_earned_time_uses_its_own_lane():
    assert choose_lane(earned=300.0, newcomer_load_s=900.0, reserve_s=300.0, budget=BUDGET) == EARNED


def test_newcomers_share_one_lane_per_hour_whatever_their_number():
    assert choose_lane(earned=0.0, newcomer_load_s=600.0, reserve_s=300.0, budget=BUDGET) == NEWCOMERS
    assert choose_lane(earned=299.9, newcomer_load_s=600.1, reserve_s=300.0, budget=BUDGET) is None
    closed = AdmissionBudgetConfig(newcomer_seconds_per_hour=0.0)
    assert choose_lane(earned=0.0, newcomer_load_s=0.0, reserve_s=1.0, budget=closed) is None


def health(**counts) -> PackHealth:
    values = {
        "judged_rows": 64,
        "judged": 512,
        "failed": 0,
        "disagreements": 0,
        "window_groups": 64,
        "window_kept": 32,
    }
    return PackHealth(**{**values, **counts})


def test_a_healthy_pack_stays():
    assert retirement_of(health(), RETIREMENT) is None
    assert retirement_of(health(window_groups=15, window_kept=0), RETIREMENT) is None  # too few groups yet


def test_a_pack_whose_groups_stopped_being_informative_retires_without_blame():
    retired = retirement_of(health(window_groups=64, window_kept=6), RETIREMENT)  # 0.094 < 0.1
    assert retired is not None and not retired.for_cause and "6 of its last 64 groups" in retired.reason
    assert retirement_of(health(window_groups=64, window_kept=7), RETIREMENT) is None  # 0.109


def test_a_verifier_that_fails_or_disagrees_retires_its_pack_for_cause():
    failing = retirement_of(health(failed=11), RETIREMENT)  # 11 / 512 = 0.0215 > 0.02
    assert (
        failing is not None and failing.for_cause and "failed on 11 of the 512 completions" in failing.reason
    )
    assert retirement_of(health(failed=10), RETIREMENT) is None  # 0.0195
    assert (
        retirement_of(health(judged_rows=15, judged=120, failed=120), RETIREMENT) is None
    )  # too few rows yet
    disagreeing = retirement_of(health(disagreements=1), RETIREMENT)
    assert disagreeing is not None and disagreeing.for_cause


def test_two_judges_disagree_only_on_a_completion_both_scored():
    validator = [[3, [1.0, 0.0, None]], [5, [0.0]]]
    assert not scores_differ(validator, [[3, [1.0, 0.0, 1.0]], [5, [0.0]]])  # a failure is counted on its own
    assert scores_differ(validator, [[3, [1.0, 1.0, None]], [5, [0.0]]])
    assert scores_differ(validator, [[3, [1.0, 0.0, None]]])  # a row missing
    assert scores_differ(validator, [[3, [1.0, 0.0]], [5, [0.0]]])  # a completion missing
