"""Attacks a dishonest worker might try against the proof check."""

import numpy as np
import pytest
import torch

from swarmrl.toploc import ProofFormatError, build_proofs, verify_proofs
from swarmrl.toploc.encoding import encode_rows
from swarmrl.toploc.field import interpolate
from swarmrl.toploc.layout import check_hidden_states
from swarmrl.toploc.points import select_points

torch.set_num_threads(1)


def _states(seed: int, tokens: int = 64, hidden: int = 1024) -> torch.Tensor:
    return torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def _forge(states: torch.Tensor, tamper) -> list[bytes]:
    """Proofs over the honest top-k points whose committed patterns were rewritten by `tamper`."""
    points = select_points(check_hidden_states(states, None), chunk_size=32, topk=128)[0]
    patterns = tamper(points.patterns.copy())
    x = points.indices % 65497
    return encode_rows(np.full(len(x), 65497), interpolate(x, patterns))


def test_replayed_proofs_from_another_completion_fail():
    assert not verify_proofs(build_proofs(_states(1)), _states(2)).ok


def test_zero_polynomial_with_a_valid_modulus_fails():
    proofs = [b"\xff\xd9" + bytes(256)] * 2
    report = verify_proofs(proofs, _states(3))
    assert not report.ok and len(report.failed_chunks) == 2


def test_truncated_or_padded_proof_bytes_raise():
    proofs = build_proofs(_states(4))
    with pytest.raises(ProofFormatError, match="proof 1 has 257 bytes"):
        verify_proofs([proofs[0], proofs[1][:-1]], _states(4))
    with pytest.raises(ProofFormatError, match="proof 0 has 259 bytes"):
        verify_proofs([proofs[0] + b"\x00", proofs[1]], _states(4))


def test_right_exponents_with_made_up_mantissas_fail():
    rng = np.random.default_rng(0)

    def randomise_mantissa(patterns):
        return (patterns & ~0x7F) | rng.integers(0, 128, size=patterns.shape)

    report = verify_proofs(_forge(_states(5), randomise_mantissa), _states(5))
    assert not report.ok and "mantissa diff mean" in report.reason
    assert all(chunk.exponent_matches == 128 for chunk in report.chunks)


def test_a_third_of_the_values_replaced_fails_although_exponents_pass():
    # 30 of 128 points wrong leaves 98 exponent matches, which clears the 90/128 rule; the interior rule
    # (points well inside the top-k must match) catches it.
    def replace_thirty(patterns):
        patterns[:, :30] = (patterns[:, :30] + 0x0100) & 0xFFFF  # two exponent steps up
        return patterns

    report = verify_proofs(_forge(_states(6), replace_thirty), _states(6))
    assert not report.ok
    assert all(chunk.exponent_matches == 98 for chunk in report.chunks)
    assert "interior mismatches" in report.reason


def test_values_nudged_beyond_noise_fail():
    def nudge(patterns):
        return patterns + 12  # 12 bf16 steps larger magnitude for positive values, smaller for negative

    report = verify_proofs(_forge(_states(7), nudge), _states(7))
    assert not report.ok and "mantissa diff" in report.reason
