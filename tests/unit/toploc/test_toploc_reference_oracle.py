"""Byte compatibility with the reference `toploc` 0.1.6 (runs only where the reference is installed), and
the reference defects this implementation fixes."""

import pytest
import torch

from swarmrl.toploc import build_proofs, verify_proofs
from swarmrl.toploc.layout import check_hidden_states
from swarmrl.toploc.points import select_points

reference = pytest.importorskip("toploc", reason="reference package toploc==0.1.6 not installed")
torch.set_num_threads(1)


def _tie_free_states(tokens: int, hidden: int, seed: int) -> torch.Tensor:
    """Small noise plus 128 planted values of distinct magnitude per 32-token chunk: every top-k picks the
    same set here, so these tests see the encoding and verification, not the choice among ties."""
    generator = torch.Generator().manual_seed(seed)
    states = torch.rand(tokens, hidden, generator=generator) - 0.5
    flat = states.view(-1)
    for start in range(0, tokens, 32):
        span = min(32, tokens - start) * hidden
        positions = start * hidden + torch.randperm(span, generator=generator)[:128]
        magnitudes = 2.0 + torch.arange(128) / 8  # exactly representable, distinct in bf16
        signs = torch.randint(0, 2, (128,), generator=generator) * 2 - 1
        flat[positions] = magnitudes * signs
    return states.to(torch.bfloat16)


@pytest.mark.parametrize("hidden", [64 * 8, 1024, 4096])
def test_same_points_give_identical_bytes(hidden):
    states = torch.randn(64, hidden, generator=torch.Generator().manual_seed(hidden)).to(torch.bfloat16)
    ours = build_proofs(states)
    for points in select_points(check_hidden_states(states, None), chunk_size=32, topk=128):
        for row, position in enumerate(points.proof_positions.tolist()):
            flat = states[position * 32 : (position + 1) * 32].reshape(-1)
            indices = torch.from_numpy(points.indices[row])
            assert reference.ProofPoly.from_points_tensor(indices, flat[indices]).to_bytes() == ours[position]


def _plain_bf16_states(tokens: int, hidden: int, seed: int) -> torch.Tensor:
    """What a model's hidden states look like at bf16 precision: equal magnitudes at the top-k border in
    nearly every chunk (8 significant bits), so the bytes depend on which of them the top-k keeps."""
    return (torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(seed)) * 3).to(torch.bfloat16)


def _reference_bytes(completion: torch.Tensor, prompt: torch.Tensor | None = None) -> list[bytes]:
    if prompt is None:
        return reference.build_proofs_bytes([row[None] for row in completion], 32, 128, skip_prefill=True)
    activations = [prompt] + [row[None] for row in completion]
    return reference.build_proofs_bytes(activations, 32, 128, skip_prefill=False)


@pytest.mark.parametrize("hidden", [64, 896, 1024, 4096])
def test_tied_bf16_states_give_the_reference_bytes(hidden):
    # 70 tokens: two full chunks and a 6-token tail; with the 16-token prompt chunk and hidden 64, 896 and
    # 1024 that covers both of torch's CPU top-k algorithms (heap select when 64·k <= n, introselect below).
    prompt, completion = (
        _plain_bf16_states(16, hidden, seed=hidden),
        _plain_bf16_states(70, hidden, seed=hidden + 1),
    )
    assert build_proofs(completion, prompt_hidden=prompt) == _reference_bytes(completion, prompt)
    assert build_proofs(completion) == _reference_bytes(completion)


def test_tied_states_of_the_issue_give_the_reference_bytes():
    # 64 x 1024, randn * 3 in bf16: the second proof used to differ in all 256 coefficient bytes.
    states = (torch.randn(64, 1024, generator=torch.Generator().manual_seed(0)) * 3).to(torch.bfloat16)
    assert build_proofs(states) == _reference_bytes(states)


def test_all_equal_magnitudes_give_the_reference_bytes():
    # A prover cannot steer the choice among ties: with every |x| equal it is still the reference's.
    signs = torch.randint(0, 2, (40, 896), generator=torch.Generator().manual_seed(9)) * 2 - 1
    states = (0.75 * signs).to(torch.bfloat16)
    assert build_proofs(states) == _reference_bytes(states)


@pytest.mark.parametrize("hidden", [896, 4096])
def test_tied_states_verify_exactly_both_ways(hidden):
    states = _plain_bf16_states(96, hidden, seed=hidden + 2)
    ours, theirs = build_proofs(states), _reference_bytes(states)
    # Same committed points on both sides: every one of the 128 values matches exactly, not just enough.
    for result in reference.verify_proofs_bytes(states, ours, 32, 128, skip_prefill=True):
        assert (result.exp_mismatches, result.mant_err_mean, result.mant_err_median) == (0, 0, 0)
    report = verify_proofs(theirs, states)
    assert report.ok
    assert all(c.exponent_matches == 128 and c.mantissa_diff_mean == 0 for c in report.chunks)


@pytest.mark.parametrize(("tokens", "hidden"), [(96, 1024), (64, 4096)])
def test_full_build_matches_reference_bytes_with_prompt(tokens, hidden):
    prompt, completion = _tie_free_states(16, hidden, seed=1), _tie_free_states(tokens, hidden, seed=tokens)
    activations = [prompt] + [row[None] for row in completion]
    expected = reference.build_proofs_bytes(activations, 32, 128, skip_prefill=False)
    assert build_proofs(completion, prompt_hidden=prompt) == expected


def test_proofs_interoperate_both_ways():
    states = _tie_free_states(96, 2048, seed=5)
    ours = build_proofs(states)
    for result in reference.verify_proofs_bytes(states, ours, 32, 128, skip_prefill=True):
        assert (result.exp_mismatches, result.mant_err_mean, result.mant_err_median) == (0, 0, 0)
    theirs = reference.build_proofs_bytes([row[None] for row in states], 32, 128, skip_prefill=True)
    assert verify_proofs(theirs, states).ok


def test_fixed_reference_defect_sign_flip():
    states = _tie_free_states(32, 1024, seed=6)
    proofs = build_proofs(states)
    flipped = -states
    assert reference.verify_proofs_bytes(flipped, proofs, 32, 128, skip_prefill=True)[0].exp_mismatches == 0
    assert not verify_proofs(proofs, flipped).ok


def test_fixed_reference_defect_unreduced_index():
    # The reference's list path evaluates at the raw index, i.e. at index mod 65497 instead of index mod m:
    # chunks whose modulus m < 65497 (about one in eight) and whose indices reach m are rejected although
    # honest. This implementation reduces on every path.
    prompt, completion = _tie_free_states(16, 4096, seed=7), _tie_free_states(320, 4096, seed=8)
    activations = [prompt] + [row[None] for row in completion]
    proofs = reference.build_proofs_bytes(activations, 32, 128, skip_prefill=False)
    results = reference.verify_proofs_bytes(activations, proofs, 32, 128, skip_prefill=False)
    falsely_rejected = [i for i, result in enumerate(results) if result.exp_mismatches > 38]
    assert falsely_rejected
    assert all(int.from_bytes(proofs[i][:2], "big") < 65497 for i in falsely_rejected)
    assert verify_proofs(proofs, completion, prompt_hidden=prompt).ok


def test_fixed_reference_defect_null_proofs():
    # The reference returns all-zero proofs (modulus 0) when building fails; those are refused here.
    null = reference.ProofPoly.null(128).to_bytes()
    with pytest.raises(ValueError, match="modulus 0"):
        verify_proofs([null], torch.randn(32, 256))
