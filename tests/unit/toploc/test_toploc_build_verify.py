"""Prover and validator together: honest states pass, tampered or foreign states fail with a reason."""

import pytest
import torch

from swarmrl.configs.toploc import VerifyThresholds
from swarmrl.toploc import (
    HiddenStatesError,
    ProofError,
    build_proofs,
    expected_proof_count,
    split_prefill_hidden,
    verify_proofs,
)

torch.set_num_threads(1)


def _states(tokens: int, hidden: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, hidden, generator=generator).to(torch.bfloat16)


def _lm_states(tokens: int, hidden: int, seed: int, validator_kernel: bool) -> torch.Tensor:
    """A projection as the prover computes it (fp32 matmul, rounded to bf16) or as a validator might
    (bf16 operands, two half-sums in another order): the same maths, different rounding."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(tokens, 512, generator=generator)
    weight = torch.randn(512, hidden, generator=generator) / 512**0.5
    if not validator_kernel:
        return (inputs @ weight).to(torch.bfloat16)
    inputs, weight = inputs.to(torch.bfloat16), weight.to(torch.bfloat16)
    return inputs[:, 256:] @ weight[256:] + inputs[:, :256] @ weight[:256]


def test_one_258_byte_proof_per_chunk_plus_prompt():
    completion, prompt = _states(100, 256, 0), _states(7, 256, 1)
    assert [len(p) for p in build_proofs(completion)] == [258] * 4
    assert (
        len(build_proofs(completion, prompt_hidden=prompt))
        == 5
        == expected_proof_count(100, commit_prompt=True)
    )
    assert len(build_proofs(completion, chunk_size=10)) == 10 == expected_proof_count(100, chunk_size=10)


def test_build_is_deterministic_and_prompt_proof_comes_first():
    completion, prompt = _states(40, 256, 0), _states(7, 256, 1)
    proofs = build_proofs(completion, prompt_hidden=prompt)
    assert proofs == build_proofs(completion.clone(), prompt_hidden=prompt.clone())
    assert proofs[0] == build_proofs(prompt, chunk_size=7)[0]
    assert proofs[1:] == build_proofs(completion)


def test_identical_states_pass_with_perfect_scores():
    completion, prompt = _states(70, 512, 2), _states(9, 512, 3)
    report = verify_proofs(build_proofs(completion, prompt_hidden=prompt), completion, prompt_hidden=prompt)
    assert report.ok and report.reason == ""
    assert len(report.chunks) == 4
    assert report.chunks[0].span.prompt and report.chunks[-1].span.end == 70
    for chunk in report.chunks:
        assert (chunk.exponent_matches, chunk.sign_mismatches, chunk.mantissa_diff_mean) == (128, 0, 0.0)


def test_recomputation_in_another_matmul_order_passes():
    prover = _lm_states(96, 1024, 4, validator_kernel=False)
    validator = _lm_states(96, 1024, 4, validator_kernel=True)
    assert not torch.equal(prover, validator)  # the noise is real
    report = verify_proofs(build_proofs(prover), validator)
    assert report.ok, report.reason


def test_fp32_states_are_rounded_to_bf16_like_the_engine():
    fp32 = torch.randn(33, 256, generator=torch.Generator().manual_seed(5))
    assert build_proofs(fp32) == build_proofs(fp32.to(torch.bfloat16))
    assert verify_proofs(build_proofs(fp32), fp32.to(torch.bfloat16)).ok


def test_small_relative_noise_passes():
    states = _states(64, 1024, 6)
    noisy = states.float() * (
        1 + 2e-3 * torch.randn(states.shape, generator=torch.Generator().manual_seed(7))
    )
    assert verify_proofs(build_proofs(states), noisy.to(torch.bfloat16)).ok


def test_other_states_fail():
    report = verify_proofs(build_proofs(_states(64, 512, 8)), _states(64, 512, 9))
    assert not report.ok
    assert len(report.failed_chunks) == 2
    assert "exponent matches" in report.reason


def test_sign_flip_of_top_values_fails():
    states = _states(32, 512, 10)
    proofs = build_proofs(states)
    flat = states.reshape(-1).clone()
    flat[flat.float().abs().topk(128).indices] *= -1
    report = verify_proofs(proofs, flat.reshape(32, 512))
    assert not report.ok
    assert report.chunks[0].sign_mismatches == 128
    # Flipping a handful of signs is caught even when exponents would still clear 90/128.
    few = states.reshape(-1).clone()
    few[few.float().abs().topk(5).indices] *= -1
    report = verify_proofs(proofs, few.reshape(32, 512))
    assert not report.ok and "sign mismatches 5" in report.reason


def test_swapping_two_token_rows_inside_a_chunk_fails():
    # The rows holding the two largest values: their committed points sit well inside the top-k. (A swap of
    # rows whose top values are near the k-th magnitude, or nearly equal, is within honest tolerance.)
    states = _states(64, 512, 11)
    largest = states[32:].float().abs().reshape(-1).topk(2).indices // 512
    rows = [32 + int(row) for row in largest]
    if rows[0] == rows[1]:
        rows[1] = 32 + (rows[0] + 1 - 32) % 32
    swapped = states.clone()
    swapped[rows] = states[rows[::-1]]
    report = verify_proofs(build_proofs(states), swapped)
    assert not report.ok
    assert report.chunks[0].ok and not report.chunks[1].ok
    assert "interior mismatches" in report.chunks[1].reason


def test_swapping_two_chunks_proofs_fails():
    states = _states(64, 512, 12)
    proofs = build_proofs(states)
    assert not verify_proofs(proofs[::-1], states).ok


@pytest.mark.parametrize("scale", [1.5, 2.0, 0.5])
def test_scaled_states_fail(scale):
    states = _states(32, 512, 13)
    assert not verify_proofs(build_proofs(states), (states.float() * scale).to(torch.bfloat16)).ok


def test_proof_count_mismatch_is_a_failure_not_a_crash():
    states = _states(100, 256, 14)
    proofs = build_proofs(states)
    for wrong in (proofs[:-1], [], proofs + proofs[:1]):
        report = verify_proofs(wrong, states)
        assert not report.ok and report.chunks == ()
        assert (
            f"expected 4 proofs for 100 completion tokens (chunk size 32, prompt not committed), got {len(wrong)}"
            in (report.reason)
        )
    report = verify_proofs(proofs, states, prompt_hidden=states[:5])
    assert not report.ok and "expected 5" in report.reason


def test_tiny_hidden_size_short_last_chunk_commits_every_value():
    states = _states(33, 64, 15)  # last chunk: one token, 64 values < 128
    proofs = build_proofs(states)
    report = verify_proofs(proofs, states)
    assert report.ok
    assert [chunk.points for chunk in report.chunks] == [128, 64]
    tampered = states.clone()
    tampered[32, 0] = tampered[32, 0] * 2 + 1
    assert not verify_proofs(proofs, tampered).ok


def test_stricter_thresholds_reject_noise_default_accepts():
    prover = _lm_states(32, 1024, 16, validator_kernel=False)
    validator = _lm_states(32, 1024, 16, validator_kernel=True)
    proofs = build_proofs(prover)
    assert verify_proofs(proofs, validator).ok
    strict = VerifyThresholds(
        min_exponent_match_fraction=1.0, max_mantissa_diff_mean=0.0, max_mantissa_diff_median=0
    )
    report = verify_proofs(proofs, validator, thresholds=strict)
    assert not report.ok and "mantissa diff mean" in report.reason


@pytest.mark.parametrize(
    ("states", "message"),
    [
        (torch.empty(0, 64, dtype=torch.bfloat16), "empty"),
        (torch.zeros(4, 0), "empty"),
        (torch.zeros(64), "2-D"),
        (torch.zeros(2, 3, 4), "2-D"),
        (torch.zeros(4, 64, dtype=torch.int32), "floating point"),
        ([[1.0, 2.0]], "torch.Tensor"),
    ],
)
def test_unusable_states_raise(states, message):
    with pytest.raises(HiddenStatesError, match=message):
        build_proofs(states)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 3.4e38])
def test_non_finite_states_raise_instead_of_null_proofs(bad):
    states = _states(40, 256, 17).float()  # fp32, so 1e39 overflows only when rounded to bf16
    states[35, 7] = bad  # in the short last chunk
    with pytest.raises(HiddenStatesError, match="inf or NaN"):
        build_proofs(states)
    with pytest.raises(HiddenStatesError, match="inf or NaN"):
        verify_proofs(build_proofs(states[:32]), states[:32].clone().fill_(bad))


def test_bad_parameters_raise():
    states = _states(8, 256, 18)
    for kwargs in ({"chunk_size": 0}, {"topk": 0}, {"chunk_size": 2.5}, {"topk": True}, {"topk": 1025}):
        with pytest.raises(ProofError):
            build_proofs(states, **kwargs)
    with pytest.raises(HiddenStatesError, match="hidden size"):
        build_proofs(states, prompt_hidden=_states(3, 128, 19))


def test_split_prefill_hidden_aligns_with_the_engines_capture():
    prefill = torch.arange(10 * 4, dtype=torch.float32).reshape(10, 4)  # prompt 6 + completion 4
    prompt, completion = split_prefill_hidden(prefill, 6)
    assert prompt.shape == (6, 4) and completion.shape == (4, 4)
    assert torch.equal(completion[0], prompt[-1])  # the last prompt position produced completion token 0
    assert torch.equal(completion[-1], prefill[8])
    for prompt_len in (0, 10):
        with pytest.raises(HiddenStatesError, match="prompt_len"):
            split_prefill_hidden(prefill, prompt_len)


def test_batched_build_gives_the_same_bytes_as_one_by_one():
    from swarmrl.toploc import build_proofs_batch

    generator = torch.Generator().manual_seed(7)
    completions = [torch.randn(n, 48, generator=generator).to(torch.bfloat16) for n in (1, 3, 32, 33, 70)]
    prompts = [
        torch.randn(5, 48, generator=generator).to(torch.bfloat16) if i % 2 else None for i in range(5)
    ]
    batched = build_proofs_batch(completions, prompt_hidden=prompts)
    assert batched == [build_proofs(c, prompt_hidden=p) for c, p in zip(completions, prompts, strict=True)]


def test_batched_verify_gives_the_same_reports_as_one_by_one():
    from swarmrl.toploc import build_proofs_batch, verify_proofs_batch

    generator = torch.Generator().manual_seed(11)
    states = [torch.randn(n, 48, generator=generator).to(torch.bfloat16) for n in (2, 32, 40, 65)]
    proofs = build_proofs_batch(states)
    proofs[2] = proofs[2][:1]  # wrong count for the third completion
    tampered = [s.clone() for s in states]
    tampered[1] = -tampered[1]  # sign flip for the second
    batched = verify_proofs_batch(proofs, tampered)
    single = [verify_proofs(p, s) for p, s in zip(proofs, tampered, strict=True)]
    assert [r.ok for r in batched] == [r.ok for r in single] == [True, False, False, True]
    assert [r.reason for r in batched] == [r.reason for r in single]
    assert batched[0].chunks == single[0].chunks and batched[3].chunks == single[3].chunks
