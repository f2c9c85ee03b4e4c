"""The [loss] section: defaults are the INTELLECT-2 recipe, variants chosen by `kind`, bad values refused."""

from __future__ import annotations

import math
import tomllib

import pytest
from pydantic import ValidationError

from swarmrl.configs.loss import (
    CISPOClip,
    GSPOClip,
    LossConfig,
    MaskedIS,
    NoCorrection,
    TruncatedIS,
    TwoSidedClip,
    loss_preset,
)


def test_defaults_are_the_intellect2_recipe() -> None:
    config = LossConfig()
    assert config.objective == TwoSidedClip(epsilon_low=0.2, epsilon_high=0.2, delta=4.0)
    assert config.correction == NoCorrection()
    assert config.normalisation == "constant"
    assert (config.entropy_coef, config.kl_coef) == (0.0, 0.0)
    assert LossConfig.model_validate({}) == config


def test_every_field_is_documented() -> None:
    for model in (LossConfig, TwoSidedClip, GSPOClip, CISPOClip, TruncatedIS, MaskedIS):
        for name, field in model.model_fields.items():
            assert name == "kind" or field.description, f"{model.__name__}.{name} has no description"


def test_variants_are_chosen_by_kind_from_toml() -> None:
    data = tomllib.loads(
        """
        normalisation = "token"
        max_tokens = 1024
        [objective]
        kind = "gspo"
        [correction]
        kind = "mis"
        high = 3.0
        """
    )
    config = LossConfig.model_validate(data)
    assert config.objective == GSPOClip(epsilon_low=3e-4, epsilon_high=4e-4)
    assert config.correction == MaskedIS(low=0.5, high=3.0)
    assert config.max_tokens == 1024


@pytest.mark.parametrize(
    "data",
    [
        {"objective": {"kind": "ppo"}},
        {"objective": {"kind": "grpo_two_sided", "delta": 1.1}},  # δ must exceed 1 + ε_high
        {"objective": {"kind": "grpo_two_sided", "epsilon_low": 1.0}},
        {"correction": {"kind": "tis", "cap": 0.0}},
        {"correction": {"kind": "mis", "low": 3.0, "high": 2.0}},
        {"normalisation": "batch"},
        {"max_tokens": 0},
        {"entropy_coef": -0.1},
        {"clip": 0.2},
    ],
)
def test_invalid_sections_are_refused(data: dict) -> None:
    with pytest.raises(ValidationError):
        LossConfig.model_validate(data)


def test_presets() -> None:
    dapo = loss_preset("dapo_clip_higher", max_tokens=512)
    assert (dapo.objective.epsilon_low, dapo.objective.epsilon_high, dapo.normalisation) == (
        0.2,
        0.28,
        "token",
    )
    assert dapo.max_tokens == 512
    assert loss_preset("dr_grpo").objective.delta == math.inf
    assert loss_preset("gspo").objective == GSPOClip()
    assert loss_preset("cispo").objective == CISPOClip(epsilon_low=1.0, epsilon_high=0.28)
    assert loss_preset("intellect2") == LossConfig()
