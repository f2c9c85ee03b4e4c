"""Group advantages by hand, the informative-group mask and the online (dynamic sampling) filter."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from swarmrl.rollouts.advantages import (
    MIN_INFORMATIVE_RATE,
    AdvantageError,
    GroupVerdict,
    OnlineFilter,
    grpo_advantages,
    informative_groups,
    prompts_for_groups,
)

torch.set_num_threads(1)


def test_grpo_advantages_by_hand_use_the_population_std() -> None:
    # mean 0.5, population std 0.5 (the sample std would be 0.577): Â = ±0.5 / (0.5 + 1e-6)
    advantages = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4)
    a = 0.5 / (0.5 + 1e-6)
    torch.testing.assert_close(advantages, torch.tensor([a, -a, -a, a]), atol=1e-7, rtol=0)


def test_dr_grpo_advantages_only_centre() -> None:
    advantages = grpo_advantages([1.0, 0.0, 0.0, 1.0, 3.0, 1.0], group_size=3, kind="dr_grpo")
    expected = torch.tensor([1 - 1 / 3, -1 / 3, -1 / 3, 1 - 5 / 3, 3 - 5 / 3, 1 - 5 / 3])
    torch.testing.assert_close(advantages, expected)


def test_advantages_keep_the_grouped_layout_and_zero_equal_groups() -> None:
    rewards = torch.tensor([[0.1, 0.1, 0.1], [2.0, 0.0, 1.0]], dtype=torch.float64)
    advantages = grpo_advantages(rewards, group_size=3, eps=0.0)
    assert advantages.shape == (2, 3)
    assert torch.equal(advantages[0], torch.zeros(3, dtype=torch.float64))
    std = math.sqrt(2 / 3)
    torch.testing.assert_close(advantages[1], torch.tensor([1 / std, -1 / std, 0.0], dtype=torch.float64))


@given(st.lists(st.floats(-100, 100, allow_nan=False), min_size=12, max_size=12))
def test_advantages_have_zero_mean_per_group(rewards: list[float]) -> None:
    for kind in ("grpo", "dr_grpo"):
        advantages = grpo_advantages(torch.tensor(rewards, dtype=torch.float64), group_size=4, kind=kind)
        assert torch.allclose(advantages.view(-1, 4).sum(-1), torch.zeros(3, dtype=torch.float64), atol=1e-9)


def test_informative_groups_mask() -> None:
    mask = informative_groups([1, 1, 0, 0, 1, 0], group_size=2)
    assert mask.tolist() == [False, False, True]


@pytest.mark.parametrize(
    ("rewards", "group_size", "problem"),
    [
        ([1.0, 0.0, 1.0], 2, "do not split"),
        ([1.0, math.nan], 2, "NaN"),
        ([1.0, math.inf], 2, "NaN or infinity"),
        (torch.zeros(2, 3), 4, "groups of 3"),
        (torch.zeros(2, 2, 2), 2, "shape"),
        ([1.0, 0.0], 0, "group_size"),
    ],
)
def test_bad_rewards_raise(rewards, group_size: int, problem: str) -> None:
    with pytest.raises(AdvantageError, match=problem):
        grpo_advantages(rewards, group_size)


def test_online_filter_drops_uninformative_groups_and_stops_when_full() -> None:
    accumulator: OnlineFilter[str] = OnlineFilter(target_groups=2)
    assert accumulator.add("a", [1.0, 1.0]) is GroupVerdict.UNINFORMATIVE
    assert accumulator.add("b", [1.0, 0.0]) is GroupVerdict.KEPT
    assert not accumulator.full
    assert accumulator.add("c", [0.0, 0.0]) is GroupVerdict.UNINFORMATIVE
    assert accumulator.add("d", [0.5, 0.0]) is GroupVerdict.KEPT
    assert accumulator.full
    assert accumulator.add("e", [0.0, 1.0]) is GroupVerdict.OVERFLOW
    assert accumulator.groups == ["b", "d"]
    assert (accumulator.seen, accumulator.dropped, accumulator.overflow) == (4, 2, 1)
    assert accumulator.dropped_fraction == 0.5


def _informative_floor(n: int, rate: float) -> float:
    """n·p − √(n·p·(1 − p)): the informative groups of n prompts, one binomial standard deviation short."""
    return n * rate - math.sqrt(n * rate * (1 - rate))


def test_prompts_for_groups_by_hand() -> None:
    # 32 of 35 groups informative: p = 33/37; 39 prompts give 39p - sqrt(39p(1-p)) = 34.78 - 1.94 = 32.85 >= 32,
    # 38 give 33.89 - 1.91 = 31.98 < 32.
    assert prompts_for_groups(32, seen=35, informative=32) == 39
    assert (
        prompts_for_groups(32, seen=0, informative=0) == 32
    )  # nothing seen: every group assumed informative
    assert prompts_for_groups(0, seen=35, informative=32) == 0
    # Every group informative so far still leaves room for one that is not: p = 33/34.
    assert prompts_for_groups(32, seen=32, informative=32) == 34


@given(
    groups=st.integers(1, 64),
    seen=st.integers(1, 200),
    share=st.floats(0.0, 1.0),
)
def test_prompts_for_groups_is_the_smallest_count_one_deviation_short_of_the_need(
    groups: int, seen: int, share: float
) -> None:
    informative = round(seen * share)
    rate = max((informative + 1) / (seen + 2), MIN_INFORMATIVE_RATE)
    n = prompts_for_groups(groups, seen, informative)
    assert n >= groups
    assert _informative_floor(n, rate) >= groups - 1e-6
    assert n == groups or _informative_floor(n - 1, rate) < groups + 1e-6


def test_a_policy_whose_groups_all_agree_is_asked_for_at_the_least_rate_a_round() -> None:
    # p floored at 1/4: 44 prompts give 11 - sqrt(44 * 3/16) = 8.13 >= 8; 43 give 10.75 - 2.84 = 7.91.
    assert prompts_for_groups(8, seen=100, informative=0) == 44
    assert prompts_for_groups(8, seen=6, informative=1) == 44  # (1 + 1) / (6 + 2) is exactly the floor


def test_online_filter_asks_for_the_prompts_of_the_groups_it_lacks() -> None:
    accumulator: OnlineFilter[str] = OnlineFilter(target_groups=3)
    assert accumulator.prompts_to_fill() == 3
    accumulator.add("a", [1.0, 0.0])
    accumulator.add("b", [1.0, 1.0])
    assert accumulator.prompts_to_fill() == prompts_for_groups(2, seen=2, informative=1)
    accumulator.add("c", [0.0, 1.0])
    accumulator.add("d", [0.0, 1.0])
    assert accumulator.full and accumulator.prompts_to_fill() == 0


def test_online_filter_rejects_bad_groups() -> None:
    accumulator: OnlineFilter[int] = OnlineFilter(target_groups=1)
    with pytest.raises(AdvantageError, match="no rewards"):
        accumulator.add(0, [])
    with pytest.raises(AdvantageError, match="non-finite"):
        accumulator.add(0, [1.0, math.nan])
    assert accumulator.seen == 0 and accumulator.dropped_fraction == 0.0
    with pytest.raises(AdvantageError, match="target_groups"):
        OnlineFilter(target_groups=0)
