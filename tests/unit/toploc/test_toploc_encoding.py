"""The 258-byte proof format: hand-built bytes, round trips and every malformed-input case."""

import pytest

from swarmrl.toploc import (
    Proof,
    ProofError,
    ProofFormatError,
    decode_proof,
    decode_proofs,
    encode_proof,
    proof_size,
)


def _proof_bytes(modulus: int, coefficients: list[int]) -> bytes:
    return modulus.to_bytes(2, "big") + b"".join(c.to_bytes(2, "big") for c in coefficients)


def test_size_is_258_bytes_for_128_points():
    assert proof_size() == 258
    assert proof_size(4) == 10


def test_encode_by_hand():
    proof = Proof(modulus=65497, coefficients=(1, 258, 65496, 0))
    assert encode_proof(proof) == bytes.fromhex("ffd900010102ffd80000")


def test_round_trip():
    proof = Proof(modulus=65421, coefficients=tuple(range(0, 65497, 512))[:128])
    assert len(proof.coefficients) == 128
    assert decode_proof(encode_proof(proof)) == proof


def test_coefficients_may_exceed_the_modulus_but_not_the_field():
    # The reference interpolates in GF(65497) for every m: coefficient 65000 > m = 40000 is valid.
    data = _proof_bytes(40000, [65000] * 128)
    assert decode_proof(data).coefficients[0] == 65000
    with pytest.raises(ProofFormatError, match="coefficient 5 is 65497"):
        decode_proof(_proof_bytes(40000, [0] * 5 + [65497] + [0] * 122))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "0 bytes"),
        (b"\xff\xd9" + b"\x00" * 255, "257 bytes"),
        (b"\xff\xd9" + b"\x00" * 257, "259 bytes"),
        (_proof_bytes(0, [0] * 128), "modulus 0"),
        (_proof_bytes(65498, [0] * 128), "modulus 65498"),
        (_proof_bytes(65535, [0] * 128), "modulus 65535"),
        (_proof_bytes(100, [0] * 128), "modulus 100"),
    ],
)
def test_malformed_bytes_name_the_problem(data, message):
    with pytest.raises(ProofFormatError, match=message):
        decode_proof(data)


@pytest.mark.parametrize("data", ["ffd9" * 129, None, 42, [1, 2], bytearray(3)])
def test_non_bytes_or_wrong_length_rejected(data):
    with pytest.raises(ProofError):
        decode_proof(data)


def test_batch_decode_names_the_bad_proof():
    good = _proof_bytes(65497, [1] * 128)
    with pytest.raises(ProofFormatError, match="proof 2 has 3 bytes"):
        decode_proofs([good, good, b"abc"])
    with pytest.raises(ProofFormatError, match="sequence of bytes"):
        decode_proofs(good)
    moduli, coefficients = decode_proofs([good, bytearray(good)])
    assert moduli.tolist() == [65497, 65497]
    assert coefficients.shape == (2, 128)


def test_encode_refuses_out_of_range_fields():
    with pytest.raises(ProofFormatError, match="modulus 0"):
        encode_proof(Proof(modulus=0, coefficients=(0,) * 128))
    with pytest.raises(ProofFormatError, match="GF"):
        encode_proof(Proof(modulus=65497, coefficients=(70000,)))
