"""Policy losses against hand-computed values and their defining gradient properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from swarmrl.configs.loss import (
    CISPOClip,
    GSPOClip,
    LossConfig,
    MaskedIS,
    TruncatedIS,
    TwoSidedClip,
    loss_preset,
)
from swarmrl.trainer.losses import LossInputError, policy_loss
from swarmrl.trainer.objectives import two_sided_clip_terms
from swarmrl.trainer.token_batch import token_batch

torch.set_num_threads(1)
F64 = torch.float64
BOUNDARIES = (math.log(0.8), math.log(1.2), math.log(4.0))


def ratios_to_logprobs(ratios: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs requiring grad, old logprobs) whose ratio exp(logπ − logπ_old) is exactly `ratios`."""
    old = torch.full((len(ratios), len(ratios[0])), -1.0, dtype=F64)
    new = (old + torch.tensor(ratios, dtype=F64).log()).requires_grad_(True)
    return new, old


def full_mask(rows: int, cols: int) -> torch.Tensor:
    return torch.ones(rows, cols, dtype=torch.bool)


def test_two_sided_clip_by_hand_per_token_advantages() -> None:
    # r = [0.5, 1.1, 1.5, 5.0], A = [+1, -1, +1, -1], ε = 0.2, δ = 4:
    #   t0: max(-0.5, -0.8)        = -0.5  gradient -r·A = -0.5
    #   t1: max(1.1, 1.1)          =  1.1  gradient -r·A = +1.1 (inside the band)
    #   t2: max(-1.5, -1.2)        = -1.2  clipped high: gradient 0
    #   t3: r̃ = 4, max(4.0, 1.2)   =  4.0  δ-capped: gradient 0
    # token mean = 3.4 / 4 = 0.85
    logprobs, old = ratios_to_logprobs([[0.5, 1.1, 1.5, 5.0]])
    advantages = torch.tensor([[1.0, -1.0, 1.0, -1.0]], dtype=F64)
    config = LossConfig(normalisation="token")
    out = policy_loss(logprobs, old, advantages, full_mask(1, 4), config=config)
    assert out.loss.item() == pytest.approx(0.85, abs=1e-12)
    out.loss.backward()
    expected_grad = torch.tensor([[-0.5, 1.1, 0.0, 0.0]], dtype=F64) / 4
    torch.testing.assert_close(logprobs.grad, expected_grad, atol=1e-12, rtol=0)
    assert out.metrics["clip_high_fraction"].item() == pytest.approx(0.25)
    assert out.metrics["delta_capped_fraction"].item() == pytest.approx(0.25)
    assert out.metrics["clip_low_fraction"].item() == 0.0
    assert out.metrics["ratio_mean"].item() == pytest.approx((0.5 + 1.1 + 1.5 + 5.0) / 4)


def test_two_sided_clip_by_hand_negative_sequence_advantage_constant_normalisation() -> None:
    # A = -2 for the whole row, r = [0.5, 0.9, 1.5, 6.0]:
    #   t0: max(1.0, 1.6) = 1.6   clipped low: gradient 0
    #   t1: max(1.8, 1.8) = 1.8   gradient -r·A = 1.8
    #   t2: max(3.0, 2.4) = 3.0   gradient 3.0 (A < 0 is not clipped above)
    #   t3: r̃ = 4: max(8.0, 2.4) = 8.0   δ-capped: gradient 0
    # constant normalisation, 1 sequence × max_tokens 8: 14.4 / 8 = 1.8
    logprobs, old = ratios_to_logprobs([[0.5, 0.9, 1.5, 6.0]])
    config = LossConfig(normalisation="constant", max_tokens=8)
    out = policy_loss(logprobs, old, torch.tensor([-2.0], dtype=F64), full_mask(1, 4), config=config)
    assert out.loss.item() == pytest.approx(1.8, abs=1e-12)
    out.loss.backward()
    torch.testing.assert_close(
        logprobs.grad, torch.tensor([[0.0, 1.8, 3.0, 0.0]], dtype=F64) / 8, atol=1e-12, rtol=0
    )
    assert out.metrics["clip_low_fraction"].item() == pytest.approx(0.25)
    assert out.metrics["delta_capped_fraction"].item() == pytest.approx(0.25)


def test_dapo_clip_higher_preset_moves_only_the_upper_bound() -> None:
    # r = 1.25, A = +1: inside 1 + 0.28, so unlike ε_high = 0.2 the token keeps its gradient.
    config = loss_preset("dapo_clip_higher")
    assert (config.objective.epsilon_low, config.objective.epsilon_high) == (0.2, 0.28)
    logprobs, old = ratios_to_logprobs([[1.25]])
    policy_loss(logprobs, old, torch.tensor([1.0], dtype=F64), full_mask(1, 1), config=config).loss.backward()
    assert logprobs.grad.item() == pytest.approx(-1.25)


@pytest.mark.parametrize("normalisation", ["token", "sequence", "constant"])
@pytest.mark.parametrize("objective", [TwoSidedClip(), GSPOClip(), CISPOClip()], ids=lambda o: o.kind)
def test_ratio_one_gives_the_reinforce_gradient(normalisation: str, objective) -> None:
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    advantages = torch.tensor([0.7, -1.3, 2.0], dtype=F64)
    old = -torch.rand(3, 5, dtype=F64) * 3
    logprobs = old.clone().requires_grad_(True)
    config = LossConfig(objective=objective, normalisation=normalisation, max_tokens=6)
    policy_loss(logprobs, old, advantages, mask, config=config).loss.backward()
    # REINFORCE: ∂L/∂logπ_t = -A · (the token's weight under the normalisation)
    weight = {
        "token": torch.full((3, 1), 1 / 9, dtype=F64),
        "sequence": 1 / (3 * mask.sum(-1, keepdim=True).to(F64)),
        "constant": torch.full((3, 1), 1 / (3 * 6), dtype=F64),
    }[normalisation]
    expected = torch.where(mask, -advantages.unsqueeze(-1) * weight, 0.0)
    torch.testing.assert_close(logprobs.grad, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("objective", [TwoSidedClip(), GSPOClip(), CISPOClip()], ids=lambda o: o.kind)
def test_constant_normalisation_ignores_padding_columns_and_rows(objective) -> None:
    torch.manual_seed(1)
    old = -torch.rand(2, 4, dtype=F64) * 2
    new = old + 0.3 * torch.randn(2, 4, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    advantages = torch.tensor([1.5, -0.5], dtype=F64)
    config = LossConfig(
        objective=objective, normalisation="constant", max_tokens=16, kl_coef=0.1, entropy_coef=0.01
    )
    ref = old - 0.2
    entropy = torch.rand(2, 4, dtype=F64)

    logprobs = new.clone().requires_grad_(True)
    base = policy_loss(logprobs, old, advantages, mask, config=config, ref_logprobs=ref, entropy=entropy)
    base.loss.backward()

    def pad(t: torch.Tensor, value: float) -> torch.Tensor:
        # 3 more columns and one more row of garbage (NaN, huge) that the mask must keep out
        wider = torch.cat([t, torch.full((2, 3), value, dtype=t.dtype)], dim=1)
        return torch.cat([wider, torch.full((1, 7), value, dtype=t.dtype)], dim=0)

    padded_logprobs = pad(new, math.nan).requires_grad_(True)
    padded_mask = torch.zeros(3, 7, dtype=torch.bool)
    padded_mask[:2, :4] = mask
    padded = policy_loss(
        padded_logprobs,
        pad(old, 1e4),
        torch.cat([advantages, torch.tensor([9.0], dtype=F64)]),
        padded_mask,
        config=config,
        ref_logprobs=pad(ref, -1e4),
        entropy=pad(entropy, math.nan),
    )
    padded.loss.backward()
    torch.testing.assert_close(padded.loss, base.loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(padded_logprobs.grad[:2, :4], logprobs.grad, atol=1e-12, rtol=0)
    assert torch.all(padded_logprobs.grad[2:] == 0) and torch.all(padded_logprobs.grad[:, 4:] == 0)
    for key, value in base.metrics.items():
        torch.testing.assert_close(padded.metrics[key], value, atol=1e-12, rtol=0)


def test_gspo_on_one_token_sequences_equals_token_level_clip() -> None:
    torch.manual_seed(2)
    old = -torch.rand(6, 1, dtype=F64)
    # ratios spread across both sides of the narrow GSPO band [1 - 3e-4, 1 + 4e-4]
    new = old + torch.tensor([[-1e-3], [-2e-4], [0.0], [3e-4], [1e-3], [5e-3]], dtype=F64)
    advantages = torch.tensor([1.0, -1.0, 0.5, -2.0, 1.0, -1.0], dtype=F64)
    mask = full_mask(6, 1)
    results = []
    for objective in (GSPOClip(), TwoSidedClip(epsilon_low=3e-4, epsilon_high=4e-4, delta=math.inf)):
        logprobs = new.clone().requires_grad_(True)
        out = policy_loss(
            logprobs, old, advantages, mask, config=LossConfig(objective=objective, normalisation="sequence")
        )
        out.loss.backward()
        results.append(
            (
                out.loss.detach(),
                logprobs.grad,
                out.metrics["clip_low_fraction"],
                out.metrics["clip_high_fraction"],
            )
        )
    for gspo_value, grpo_value in zip(*results, strict=True):
        torch.testing.assert_close(gspo_value, grpo_value, atol=1e-12, rtol=0)


def test_gspo_uses_the_length_normalised_sequence_ratio() -> None:
    # log r = [0.1, -0.1, 0.3] → s = exp(0.1); A = +1 and 0.1 > log(1 + 4e-4): the whole sequence is clipped.
    old = torch.zeros(1, 3, dtype=F64)
    logprobs = torch.tensor([[0.1, -0.1, 0.3]], dtype=F64).requires_grad_(True)
    out = policy_loss(
        logprobs,
        old,
        torch.tensor([1.0], dtype=F64),
        full_mask(1, 3),
        config=LossConfig(objective=GSPOClip(), normalisation="sequence"),
    )
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-(1 + 4e-4))
    assert torch.all(logprobs.grad == 0)
    assert out.metrics["ratio_mean"].item() == pytest.approx(math.exp(0.1))
    assert out.metrics["clip_high_fraction"].item() == 1.0
    # Inside the band every token gets s_i · A / |o_i| (the gradient of s_i itself), whatever its own ratio.
    near = torch.tensor([[1e-4, -1e-4, 0.0]], dtype=F64).requires_grad_(True)
    policy_loss(
        near,
        old,
        torch.tensor([1.0], dtype=F64),
        full_mask(1, 3),
        config=LossConfig(objective=GSPOClip(), normalisation="sequence"),
    ).loss.backward()
    torch.testing.assert_close(near.grad, torch.full((1, 3), -1 / 3, dtype=F64), atol=1e-12, rtol=0)


def test_zero_gradient_where_the_clip_or_the_delta_cap_acts() -> None:
    # Huge ratios (log r = 200 overflows exp in float32 and float64 alike) must still give exactly 0, not NaN.
    for dtype in (torch.float32, F64):
        old = torch.zeros(1, 4, dtype=dtype)
        logprobs = torch.tensor([[math.log(4.5), 200.0, math.log(1.3), 200.0]], dtype=dtype).requires_grad_(
            True
        )
        advantages = torch.tensor([[-1.0, -3.0, 1.0, 2.0]], dtype=dtype)
        out = policy_loss(
            logprobs, old, advantages, full_mask(1, 4), config=LossConfig(normalisation="token")
        )
        out.loss.backward()
        assert torch.isfinite(out.loss)
        assert torch.equal(logprobs.grad, torch.zeros_like(logprobs))
        assert out.metrics["delta_capped_fraction"].item() == 0.5


def test_two_sided_terms_value_above_delta_is_the_capped_constant() -> None:
    batch = token_batch(
        torch.tensor([[math.log(10.0)]], dtype=F64),
        torch.zeros(1, 1, dtype=F64),
        torch.tensor([-1.5], dtype=F64),
        full_mask(1, 1),
    )
    terms = two_sided_clip_terms(batch, TwoSidedClip())
    assert terms.loss.item() == pytest.approx(4.0 * 1.5)


def test_tis_with_infinite_cap_is_plain_importance_sampling() -> None:
    torch.manual_seed(3)
    old = -torch.rand(2, 5, dtype=F64) * 2
    new = old + 0.1 * torch.randn(2, 5, dtype=F64)
    engine = old + 0.5 * torch.randn(2, 5, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 1, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)
    advantages = torch.tensor([1.0, -0.7], dtype=F64)

    logprobs = new.clone().requires_grad_(True)
    config = LossConfig(correction=TruncatedIS(cap=1e300), normalisation="token")
    out = policy_loss(logprobs, old, advantages, mask, config=config, engine_logprobs=engine)
    out.loss.backward()

    reference = new.clone().requires_grad_(True)
    terms = two_sided_clip_terms(token_batch(reference, old, advantages, full_mask(2, 5)), TwoSidedClip())
    expected = (terms.loss * torch.exp(old - engine) * mask).sum() / mask.sum()
    expected.backward()
    torch.testing.assert_close(out.loss, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(logprobs.grad, reference.grad, atol=1e-12, rtol=0)
    assert out.metrics["is_corrected_fraction"].item() == 0.0


def test_tis_truncates_at_the_cap() -> None:
    # ρ = π_old / π_engine = [3, 0.5]; with C = 2 the weights are [2, 0.5]; r = 1, A = 1 → ℓ = -1 per token.
    old = torch.zeros(1, 2, dtype=F64)
    engine = torch.tensor([[-math.log(3.0), math.log(2.0)]], dtype=F64)
    logprobs = old.clone().requires_grad_(True)
    config = LossConfig(correction=TruncatedIS(cap=2.0), normalisation="token")
    out = policy_loss(
        logprobs, old, torch.tensor([1.0], dtype=F64), full_mask(1, 2), config=config, engine_logprobs=engine
    )
    assert out.loss.item() == pytest.approx(-(2.0 + 0.5) / 2)
    assert out.metrics["is_corrected_fraction"].item() == 0.5


def test_mis_masks_tokens_outside_the_band() -> None:
    # ρ = [0.4, 1.0, 2.5, 1.9] → tokens 0 and 2 fall outside [0.5, 2] and lose their gradient; the
    # normaliser still counts all 4 tokens. r = 1, A = 1 → ℓ = -1 on kept tokens: loss = -2 / 4.
    old = torch.zeros(1, 4, dtype=F64)
    engine = -torch.tensor([[0.4, 1.0, 2.5, 1.9]], dtype=F64).log()
    logprobs = old.clone().requires_grad_(True)
    config = LossConfig(correction=MaskedIS(), normalisation="token")
    out = policy_loss(
        logprobs, old, torch.tensor([1.0], dtype=F64), full_mask(1, 4), config=config, engine_logprobs=engine
    )
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-0.5)
    torch.testing.assert_close(
        logprobs.grad, torch.tensor([[0.0, -0.25, 0.0, -0.25]], dtype=F64), atol=1e-12, rtol=0
    )
    assert out.metrics["is_corrected_fraction"].item() == 0.5


@pytest.mark.parametrize(("epsilon_low", "first_weight"), [(1.0, 0.5), (0.2, 0.8)])
def test_cispo_gradient_is_clipped_weight_times_advantage(epsilon_low: float, first_weight: float) -> None:
    # r = [0.5, 1.0, 1.5, 3.0], A = [1, -1, 2, 1], ε_high = 0.28 → w = [w0, 1, 1.28, 1.28]
    logprobs, old = ratios_to_logprobs([[0.5, 1.0, 1.5, 3.0]])
    advantages = torch.tensor([[1.0, -1.0, 2.0, 1.0]], dtype=F64)
    config = LossConfig(
        objective=CISPOClip(epsilon_low=epsilon_low, epsilon_high=0.28), normalisation="token"
    )
    out = policy_loss(logprobs, old, advantages, full_mask(1, 4), config=config)
    out.loss.backward()
    weights = torch.tensor([[first_weight, 1.0, 1.28, 1.28]], dtype=F64)
    torch.testing.assert_close(logprobs.grad, -weights * advantages / 4, atol=1e-12, rtol=0)
    assert out.metrics["clip_high_fraction"].item() == 0.5
    assert out.metrics["clip_low_fraction"].item() == (0.25 if epsilon_low < 1 else 0.0)


def test_entropy_bonus_and_k3_kl_by_hand() -> None:
    # r = 1, A = 0 → policy term 0. log π_ref − log π = ln 2 → k3 = 2 − ln 2 − 1; entropy 1.5 per token.
    old = torch.full((1, 2), -1.0, dtype=F64)
    logprobs = old.clone().requires_grad_(True)
    ref = old + math.log(2.0)
    entropy = torch.full((1, 2), 1.5, dtype=F64)
    config = LossConfig(normalisation="token", entropy_coef=0.001, kl_coef=0.1)
    out = policy_loss(
        logprobs,
        old,
        torch.tensor([0.0], dtype=F64),
        full_mask(1, 2),
        config=config,
        ref_logprobs=ref,
        entropy=entropy,
    )
    k3 = 1.0 - math.log(2.0)
    assert out.loss.item() == pytest.approx(-0.001 * 1.5 + 0.1 * k3, abs=1e-12)
    assert out.metrics["kl_ref"].item() == pytest.approx(k3)
    assert out.metrics["entropy"].item() == pytest.approx(1.5)
    out.loss.backward()
    # ∂k3/∂logπ = -(exp(Δ) − 1) = -1 per token, times kl_coef / 2 tokens
    torch.testing.assert_close(logprobs.grad, torch.full((1, 2), -0.05, dtype=F64), atol=1e-12, rtol=0)


def test_approx_kl_metric_is_k3_of_old_against_new() -> None:
    logprobs, old = ratios_to_logprobs([[2.0, 0.5]])
    out = policy_loss(logprobs, old, torch.tensor([1.0], dtype=F64), full_mask(1, 2), config=LossConfig())
    expected = ((2.0 - 1 - math.log(2.0)) + (0.5 - 1 - math.log(0.5))) / 2
    assert out.metrics["approx_kl"].item() == pytest.approx(expected)


def test_micro_batches_with_totals_add_up_to_the_whole_batch() -> None:
    torch.manual_seed(4)
    old = -torch.rand(4, 6, dtype=F64)
    new = old + 0.2 * torch.randn(4, 6, dtype=F64)
    mask = torch.rand(4, 6) > 0.3
    mask[:, 0] = True
    advantages = torch.randn(4, dtype=F64)
    for normalisation in ("token", "sequence", "constant"):
        config = LossConfig(normalisation=normalisation, max_tokens=6)
        whole = policy_loss(new, old, advantages, mask, config=config).loss
        parts = sum(
            policy_loss(
                new[i : i + 2],
                old[i : i + 2],
                advantages[i : i + 2],
                mask[i : i + 2],
                config=config,
                total_sequences=4,
                total_tokens=int(mask.sum()),
            ).loss
            for i in (0, 2)
        )
        torch.testing.assert_close(parts, whole, atol=1e-12, rtol=0)


def test_missing_or_mismatched_inputs_raise_typed_errors() -> None:
    logprobs = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    advantages = torch.zeros(2)
    with pytest.raises(LossInputError, match="engine_logprobs"):
        policy_loss(logprobs, logprobs, advantages, mask, config=LossConfig(correction=TruncatedIS()))
    with pytest.raises(LossInputError, match="ref_logprobs"):
        policy_loss(logprobs, logprobs, advantages, mask, config=LossConfig(kl_coef=0.1))
    with pytest.raises(LossInputError, match="entropy"):
        policy_loss(logprobs, logprobs, advantages, mask, config=LossConfig(entropy_coef=0.1))
    with pytest.raises(LossInputError, match="old_logprobs"):
        policy_loss(logprobs, torch.zeros(2, 4), advantages, mask, config=LossConfig())
    with pytest.raises(LossInputError, match="advantages"):
        policy_loss(logprobs, logprobs, torch.zeros(3), mask, config=LossConfig())
    with pytest.raises(LossInputError, match=r"\[B, T\]"):
        policy_loss(torch.zeros(6), torch.zeros(6), advantages, torch.ones(6), config=LossConfig())
    with pytest.raises(LossInputError, match="per token"):
        policy_loss(logprobs, logprobs, advantages, mask, config=LossConfig(), sequence_ids=torch.zeros(2, 3))
    with pytest.raises(LossInputError, match=">= 0"):
        policy_loss(
            logprobs, logprobs, torch.zeros(2, 3), mask, config=LossConfig(), sequence_ids=-torch.ones(2, 3)
        )


@given(
    st.lists(
        st.tuples(
            st.floats(-3.0, 3.0).filter(lambda x: min(abs(x - b) for b in BOUNDARIES) > 1e-6),
            st.sampled_from([-2.0, -0.5, 0.5, 2.0]),
        ),
        min_size=1,
        max_size=16,
    )
)
def test_two_sided_gradient_matches_the_case_analysis(tokens: list[tuple[float, float]]) -> None:
    # ∂ℓ/∂logπ = -r·A where the surrogate is unclipped, else 0:
    #   A > 0: unclipped while r < 1 + ε;   A < 0: unclipped while 1 - ε < r < δ.
    log_ratios = torch.tensor([[t[0] for t in tokens]], dtype=F64)
    advantages = torch.tensor([[t[1] for t in tokens]], dtype=F64)
    logprobs = log_ratios.clone().requires_grad_(True)
    n = len(tokens)
    out = policy_loss(
        logprobs,
        torch.zeros(1, n, dtype=F64),
        advantages,
        full_mask(1, n),
        config=LossConfig(normalisation="token"),
    )
    out.loss.backward()
    r = log_ratios.exp()
    live = torch.where(advantages > 0, r < 1.2, (r > 0.8) & (r < 4.0))
    torch.testing.assert_close(logprobs.grad, torch.where(live, -r * advantages / n, 0.0), atol=1e-12, rtol=0)


@pytest.mark.parametrize("correction", [TruncatedIS(), MaskedIS()], ids=lambda c: c.kind)
def test_forged_engine_logprobs_cannot_poison_the_loss(correction) -> None:
    # Engine logprobs come from untrusted workers: NaN and ±inf must give a finite loss and gradient.
    old = torch.zeros(1, 4, dtype=F64)
    engine = torch.tensor([[math.nan, math.inf, -math.inf, 0.0]], dtype=F64)
    logprobs = old.clone().requires_grad_(True)
    config = LossConfig(correction=correction, normalisation="token")
    out = policy_loss(
        logprobs, old, torch.tensor([1.0], dtype=F64), full_mask(1, 4), config=config, engine_logprobs=engine
    )
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(logprobs.grad).all()
    assert logprobs.grad[0, 0] == 0.0 and logprobs.grad[0, 1] == 0.0  # NaN and ρ = 0 weigh nothing
    assert logprobs.grad[0, 3] == pytest.approx(-0.25)
    assert out.metrics["is_corrected_fraction"].item() == pytest.approx(
        0.75 if correction.kind == "mis" else 0.5
    )
