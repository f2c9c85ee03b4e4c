"""Every kind each `[loss]` union may hold is handled by its dispatcher: objectives (`build_objective`),
behaviour corrections, normalisations and presets. A kind added to a union and missed by its `match` ends in
its `assert_never` here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from config_unions import member_id, sample_of, union_members

from swarmrl.configs.loss import (
    BehaviourCorrection,
    CISPOClip,
    GSPOClip,
    LossConfig,
    MaskedIS,
    NoCorrection,
    Normalisation,
    Objective,
    PluginObjective,
    PresetName,
    TruncatedIS,
    TwoSidedClip,
    loss_preset,
)
from swarmrl.trainer.loss_plugin import load_objective_plugin
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.objectives import build_objective
from swarmrl.trainer.token_batch import TokenTerms, token_batch

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "byo"
F64 = torch.float64


def example_plugin() -> PluginObjective:
    entry = "byo_example.losses:soft_gate"
    return PluginObjective(entry=entry, source_hash=load_objective_plugin(entry).source_hash)


OBJECTIVES = {
    TwoSidedClip: TwoSidedClip,
    GSPOClip: GSPOClip,
    CISPOClip: CISPOClip,
    PluginObjective: example_plugin,
}
CORRECTIONS = {NoCorrection: NoCorrection(), TruncatedIS: TruncatedIS(), MaskedIS: MaskedIS()}


@pytest.fixture(autouse=True)
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    old = -torch.rand(2, 3, dtype=F64)
    # ratios within GSPO's narrow band (1 ± 3e-4), so every objective leaves a gradient
    logprobs = (old + 1e-5 * torch.randn(2, 3, dtype=F64)).requires_grad_(True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    return logprobs, old, torch.tensor([1.0, -0.5], dtype=F64), mask


@pytest.mark.parametrize("kind", union_members(Objective), ids=member_id)
def test_every_objective_builds_and_trains(kind) -> None:
    objective = sample_of(OBJECTIVES, kind)()
    logprobs, old, advantages, mask = inputs()
    terms = build_objective(objective)(token_batch(logprobs, old, advantages, mask))
    assert isinstance(terms, TokenTerms) and terms.loss.shape == (2, 3)
    out = policy_loss(logprobs, old, advantages, mask, config=LossConfig(objective=objective))
    out.loss.backward()
    assert torch.isfinite(out.loss) and logprobs.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", union_members(BehaviourCorrection), ids=member_id)
def test_every_behaviour_correction_weighs_the_tokens(kind) -> None:
    logprobs, old, advantages, mask = inputs()
    config = LossConfig(correction=sample_of(CORRECTIONS, kind), normalisation="token")
    out = policy_loss(logprobs, old, advantages, mask, config=config, engine_logprobs=old)
    assert torch.isfinite(out.loss)


@pytest.mark.parametrize("normalisation", union_members(Normalisation))
def test_every_normalisation_reduces_to_a_scalar(normalisation) -> None:
    logprobs, old, advantages, mask = inputs()
    out = policy_loss(logprobs, old, advantages, mask, config=LossConfig(normalisation=normalisation))
    assert out.loss.shape == () and torch.isfinite(out.loss)


@pytest.mark.parametrize("name", union_members(PresetName))
def test_every_preset_is_a_recipe(name) -> None:
    assert loss_preset(name, max_tokens=8).max_tokens == 8
    assert LossConfig(preset=name) == loss_preset(name).model_copy(update={"preset": name})
