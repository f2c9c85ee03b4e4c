"""Fuzz the untrusted inputs: arbitrary proof bytes and objects give a ProofError or a failing report —
never another exception, a hang, or an accept."""

import struct

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmrl.toploc import FIELD_PRIME, ProofError, build_proofs, decode_proof, encode_proof, verify_proofs

torch.set_num_threads(1)
STATES = torch.randn(64, 256, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
HONEST = build_proofs(STATES)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.one_of(st.binary(max_size=600), st.binary(min_size=258, max_size=258)))
def test_decode_arbitrary_bytes(data):
    try:
        proof = decode_proof(data)
    except ProofError:
        return
    assert encode_proof(proof) == data


@FUZZ
@given(
    st.one_of(st.none(), st.integers(), st.text(max_size=300), st.lists(st.integers(0, 255), max_size=300))
)
def test_decode_arbitrary_objects(value):
    try:
        decode_proof(value)
    except ProofError:
        return
    raise AssertionError("a non-bytes value decoded")


@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=300), st.binary(min_size=258, max_size=258)), max_size=4))
def test_verify_arbitrary_proof_lists(proofs):
    try:
        report = verify_proofs(proofs, STATES)
    except ProofError:
        return
    assert not report.ok and report.reason


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.integers(2**15 + 1, FIELD_PRIME),
            st.lists(st.integers(0, FIELD_PRIME - 1), min_size=128, max_size=128),
        ),
        min_size=2,
        max_size=2,
    )
)
def test_well_formed_forged_proofs_are_rejected(forged):
    proofs = [struct.pack(">129H", modulus, *coefficients) for modulus, coefficients in forged]
    report = verify_proofs(proofs, STATES)
    assert not report.ok
    assert len(report.failed_chunks) == 2


@FUZZ
@given(
    st.integers(1, 70),
    st.sampled_from([1, 7, 64, 200]),
    st.lists(st.sampled_from([0.0, -0.0, 1.0, -3.5, 1e-40, float("nan"), float("inf"), 65504.0]), min_size=1),
)
def test_arbitrary_hidden_states_never_crash(tokens, hidden, specials):
    values = np.resize(np.asarray(specials, dtype=np.float32), tokens * hidden).reshape(tokens, hidden)
    states = torch.from_numpy(values)
    try:
        proofs = build_proofs(states)
    except ProofError:
        return
    assert all(len(proof) == 258 for proof in proofs)
    assert verify_proofs(proofs, states).ok


@FUZZ
@given(st.integers(0, 1), st.one_of(st.just(2), st.integers(4, 257)), st.integers(1, 255))
def test_single_coefficient_byte_corruption_is_caught(proof_index, offset, xor):
    # Changing c_j (j >= 1) by d moves P(x) by d·x^j: a different, effectively random shift at every point.
    # c_0's low byte (offset 3) is left out: c_0 ± d adds d to every committed bit pattern, i.e. moves each
    # value by d bf16 steps, which the mantissa tolerance accepts by design for small d (below).
    proofs = list(HONEST)
    corrupted = bytearray(proofs[proof_index])
    corrupted[offset] ^= xor
    proofs[proof_index] = bytes(corrupted)
    try:
        report = verify_proofs(proofs, STATES)
    except ProofError:
        return
    assert not report.ok


def test_modulus_corruption_is_caught_when_indices_exceed_it():
    # Indices of a [32, 256] chunk stay below every valid modulus, so there m does not matter; with hidden
    # 4096 they reach 131072 and a different modulus folds them elsewhere.
    states = torch.randn(32, 4096, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    proof = build_proofs(states)[0]
    modulus = int.from_bytes(proof[:2], "big")
    forged = (modulus - 1).to_bytes(2, "big") + proof[2:]
    assert not verify_proofs([forged], states).ok


def test_constant_term_shift_is_judged_by_the_mantissa_tolerance():
    proof = bytearray(HONEST[0])
    shift_by = {1: True, 40: False}
    for shift, accepted in shift_by.items():
        constant = (int.from_bytes(proof[2:4], "big") + shift) % FIELD_PRIME
        forged = bytes(proof[:2]) + constant.to_bytes(2, "big") + bytes(proof[4:])
        assert verify_proofs([forged, HONEST[1]], STATES).ok is accepted
