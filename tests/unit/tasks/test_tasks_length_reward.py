import pytest

from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.length_reward import (
    add_length_instruction,
    clip_length_reward,
    exact_length_reward,
    length_shaped_reward,
    max_length_reward,
    sample_target_length,
)


def test_exact_is_reward_minus_alpha_distance():
    assert exact_length_reward(1.0, 1000, 1500) == pytest.approx(1.0 - 0.0003 * 500)  # 0.85
    assert exact_length_reward(1.0, 1000, 500) == pytest.approx(0.85)
    assert exact_length_reward(0.0, 2000, 2000) == 0.0
    assert exact_length_reward(0.0, 4000, 1000) == pytest.approx(-0.9)


def test_max_scales_by_clipped_linear_factor():
    # α(T−L)+0.5: T=2000, L=1000 → 0.3+0.5 = 0.8
    assert max_length_reward(1.0, 2000, 1000) == pytest.approx(0.8)
    assert max_length_reward(1.0, 2000, 2000) == pytest.approx(0.5)
    assert max_length_reward(1.0, 5000, 1000) == 1.0  # 1.2+0.5 clipped to 1
    assert max_length_reward(1.0, 1000, 5000) == 0.0  # −1.2+0.5 clipped to 0
    assert max_length_reward(0.0, 2000, 1000) == 0.0


def test_clip_zeroes_over_target():
    assert clip_length_reward(1.0, 1000, 1000) == 1.0
    assert clip_length_reward(1.0, 1000, 1001) == 0.0


def test_dispatch_passes_through_without_target():
    assert length_shaped_reward("exact", 1.0, None, 1234, 0.0003) == 1.0
    assert length_shaped_reward("exact", 1.0, -1, 1234, 0.0003) == 1.0
    assert length_shaped_reward("none", 1.0, 1000, 1234, 0.0003) == 1.0
    assert length_shaped_reward("exact", 1.0, 1000, 1234, 0.001) == pytest.approx(1.0 - 0.234)
    with pytest.raises(TaskError):
        length_shaped_reward("bogus", 1.0, 1000, 10, 0.0003)
    with pytest.raises(TaskError):
        length_shaped_reward("exact", 1.0, 1000, -5, 0.0003)


def test_target_sampling_is_seeded_and_covers_the_list():
    targets = [1000, 2000, 3000, 4000, 5000]
    draws = [sample_target_length(targets, 7, "node", i) for i in range(200)]
    assert draws == [sample_target_length(targets, 7, "node", i) for i in range(200)]
    assert set(draws) == set(targets)
    assert draws != [sample_target_length(targets, 8, "node", i) for i in range(200)]
    with pytest.raises(TaskError):
        sample_target_length([], 0)


def test_prompt_suffix():
    assert add_length_instruction("What is 2+2?  ", 3000) == "What is 2+2?\nThink for 3000 tokens."
    assert add_length_instruction("Q", 10, "Use {target} tokens") == "Q\nUse 10 tokens"
