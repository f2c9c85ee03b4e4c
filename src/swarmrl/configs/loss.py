"""The `[loss]` section: which policy objective, behaviour correction and normalisation the trainer uses.

Defaults are the INTELLECT-2 recipe (arXiv 2505.07291): two-sided clipped GRPO with ε = 0.2 and δ = 4, no
behaviour-policy correction, the constant (Dr.GRPO) normalisation it switched to mid-run, no entropy bonus and
no KL term. Each variant is one pydantic model selected by its `kind` field, so a TOML file reads

    [loss]
    normalisation = "token"
    [loss.objective]
    kind = "gspo"
    [loss.correction]
    kind = "tis"
    cap = 2.0

An objective of your own is `kind = "plugin"`: a function from your package, called as the built-in ones are
(`swarmrl.trainer.objectives`), its source pinned by the run like a reward function's.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, assert_never, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarmrl.configs.plugins import check_plugin_entry

# The entry-point group an installed package declares its loss objectives in (`entry = "name"` finds them).
LOSS_ENTRY_POINT_GROUP = "swarmrl.losses"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TwoSidedClip(_Strict):
    """INTELLECT-2's GRPO objective: PPO clipping plus a cap δ on the ratio for negative advantages."""

    kind: Literal["grpo_two_sided"] = Field("grpo_two_sided", description="objective")
    epsilon_low: float = Field(0.2, ge=0.0, lt=1.0, description="ratio clipped below at 1 - epsilon_low")
    epsilon_high: float = Field(
        0.2, ge=0.0, description="ratio clipped above at 1 + epsilon_high (DAPO clip-higher uses 0.28)"
    )
    delta: float = Field(
        4.0,
        description=(
            "r̃ = min(r, delta): tokens with A < 0 and r > delta give no gradient "
            "(must exceed 1 + epsilon_high)"
        ),
    )

    @model_validator(mode="after")
    def _delta_above_clip(self) -> TwoSidedClip:
        if self.delta <= 1.0 + self.epsilon_high:
            raise ValueError(f"delta {self.delta} must exceed 1 + epsilon_high = {1.0 + self.epsilon_high}")
        return self


class GSPOClip(_Strict):
    """GSPO (arXiv 2507.18071): one length-normalised ratio per sequence, clipped in a narrow band."""

    kind: Literal["gspo"] = Field("gspo", description="objective")
    epsilon_low: float = Field(
        3e-4, ge=0.0, lt=1.0, description="sequence ratio clipped below at 1 - epsilon_low"
    )
    epsilon_high: float = Field(4e-4, ge=0.0, description="sequence ratio clipped above at 1 + epsilon_high")


class CISPOClip(_Strict):
    """CISPO (MiniMax-M1, arXiv 2506.13585): REINFORCE weighted by a stop-gradient clipped IS ratio."""

    kind: Literal["cispo"] = Field("cispo", description="objective")
    epsilon_low: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="IS weight clipped below at 1 - epsilon_low (1.0 = no lower bound, as MiniMax-M1)",
    )
    epsilon_high: float = Field(0.28, ge=0.0, description="IS weight clipped above at 1 + epsilon_high")


class PluginObjective(_Strict):
    """An objective from your own package: `terms(batch, objective) -> TokenTerms`, the signature of the built-in
    ones; the behaviour correction, normalisation, entropy and KL terms around it stay the run's."""

    kind: Literal["plugin"] = Field("plugin", description="objective")
    entry: str = Field(
        description="'package.module:function', or the name of an entry point your package declares in the "
        f"{LOSS_ENTRY_POINT_GROUP!r} group; the function takes (batch: TokenBatch, objective: PluginObjective) "
        "and returns TokenTerms (swarmrl.trainer.token_batch)"
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="your objective's settings (JSON values), read as objective.options"
    )
    source_hash: str | None = Field(
        None,
        description="sha256 of the function's module source, recorded when the run is prepared: a trainer whose "
        "module differs refuses to train, and so does a resumed run whose module changed. Leave it out of a "
        "TOML you write.",
    )

    @model_validator(mode="after")
    def _entry_form(self) -> PluginObjective:
        check_plugin_entry(self.entry, self.source_hash, "package.module:function")
        return self


Objective = Annotated[TwoSidedClip | GSPOClip | CISPOClip | PluginObjective, Field(discriminator="kind")]


class NoCorrection(_Strict):
    """Trust that the trainer's π_old and the inference engine sampled the same distribution."""

    kind: Literal["none"] = Field("none", description="behaviour correction")


class TruncatedIS(_Strict):
    """TIS: weight each token by min(π_old / π_engine, cap), a stop-gradient factor."""

    kind: Literal["tis"] = Field("tis", description="behaviour correction")
    cap: float = Field(2.0, gt=0.0, description="C, the truncation of the importance weight π_old / π_engine")


class MaskedIS(_Strict):
    """MIS: drop tokens whose weight π_old / π_engine is outside [low, high] (they still count as tokens)."""

    kind: Literal["mis"] = Field("mis", description="behaviour correction")
    low: float = Field(0.5, ge=0.0, description="smallest accepted π_old / π_engine")
    high: float = Field(2.0, gt=0.0, description="largest accepted π_old / π_engine")

    @model_validator(mode="after")
    def _ordered(self) -> MaskedIS:
        if self.low > self.high:
            raise ValueError(f"low {self.low} exceeds high {self.high}")
        return self


BehaviourCorrection = Annotated[NoCorrection | TruncatedIS | MaskedIS, Field(discriminator="kind")]

Normalisation = Literal["token", "sequence", "constant"]
PresetName = Literal["intellect2", "dapo_clip_higher", "dr_grpo", "gspo", "cispo"]


class LossConfig(_Strict):
    """Every knob of the policy loss; see `swarmrl.trainer.losses.policy_loss` for the formulae.

    `preset` starts from a published recipe (`loss_preset`); every other field given beside it overrides the
    recipe's value (a table such as `objective` is merged key by key unless it names another `kind`).
    """

    preset: PresetName | None = Field(
        None, description="start from a published recipe: intellect2, dapo_clip_higher, dr_grpo, gspo, cispo"
    )

    @model_validator(mode="before")
    @classmethod
    def _start_from_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        name = data["preset"]
        if name not in get_args(PresetName):
            raise ValueError(f"unknown loss preset {name!r}; choose one of {', '.join(get_args(PresetName))}")
        merged = loss_preset(name).model_dump(exclude={"preset"})
        for key, value in data.items():
            base = merged.get(key)
            if (
                isinstance(base, dict)
                and isinstance(value, dict)
                and value.get("kind", base.get("kind")) == base.get("kind")
            ):
                merged[key] = {**base, **value}
            else:
                merged[key] = value
        return merged

    objective: Objective = Field(
        default_factory=TwoSidedClip,
        description="the surrogate objective, chosen by `kind`: grpo_two_sided, gspo, cispo, or plugin (yours)",
    )
    correction: BehaviourCorrection = Field(
        default_factory=NoCorrection,
        description="correction for the gap between the trainer's π_old and the inference engine's logprobs",
    )
    normalisation: Normalisation = Field(
        "constant",
        description=(
            "token: Σ loss / number of completion tokens (DAPO); sequence: mean per sequence, then mean "
            "over sequences (GRPO); constant: Σ loss / (sequences × max_tokens) (Dr.GRPO, INTELLECT-2's "
            "final choice)"
        ),
    )
    max_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "the constant length of the constant normalisation, normally the longest completion the "
            "workers may generate; None uses the width of the batch, which makes the loss depend on padding"
        ),
    )
    entropy_coef: float = Field(
        0.0, ge=0.0, description="weight of the entropy bonus (INTELLECT-2 tried 0.001); 0 turns it off"
    )
    kl_coef: float = Field(
        0.0,
        ge=0.0,
        description=(
            "weight of the k3 KL to the reference model; 0 turns it off (TRL's INTELLECT-2 recipe sets "
            "0.001, which needs a reference model's logprobs every step)"
        ),
    )


def loss_preset(name: PresetName, *, max_tokens: int | None = None) -> LossConfig:
    """The published recipes, as starting points to override."""
    match name:
        case "intellect2":
            return LossConfig(max_tokens=max_tokens)
        case "dapo_clip_higher":
            return LossConfig(
                objective=TwoSidedClip(epsilon_low=0.2, epsilon_high=0.28),
                normalisation="token",
                max_tokens=max_tokens,
            )
        case "dr_grpo":
            return LossConfig(
                objective=TwoSidedClip(delta=math.inf), normalisation="constant", max_tokens=max_tokens
            )
        case "gspo":
            return LossConfig(objective=GSPOClip(), normalisation="sequence", max_tokens=max_tokens)
        case "cispo":
            return LossConfig(objective=CISPOClip(), normalisation="token", max_tokens=max_tokens)
        case _:
            assert_never(name)
