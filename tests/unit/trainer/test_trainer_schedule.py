import math

import pytest
import torch

from swarmrl.models.optim import build_optimizer, lr_multiplier


def test_warmup_is_linear_then_constant_without_decay():
    assert [lr_multiplier(s, 3, None, 0.1) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_runs_from_one_to_the_floor_at_decay_steps_and_stays_there():
    # warmup 2, decay over steps 2..12 (span 10): halfway is the midpoint between 1 and the floor.
    assert lr_multiplier(2, 2, 12, 0.1) == pytest.approx(1.0)
    assert lr_multiplier(7, 2, 12, 0.1) == pytest.approx(0.55)
    assert lr_multiplier(4, 2, 12, 0.1) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.2)))
    assert lr_multiplier(12, 2, 12, 0.1) == pytest.approx(0.1)
    assert lr_multiplier(50, 2, 12, 0.1) == pytest.approx(0.1)


def test_scheduler_applies_the_multiplier_to_the_optimizer_rate():
    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), warmup_steps=1, decay_steps=5)
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [1e-3 * lr_multiplier(s, 1, 5, 0.1) for s in range(6)]
    assert rates == pytest.approx(expected)
    assert rates[0] == pytest.approx(5e-4) and rates[-1] == pytest.approx(1e-4)
