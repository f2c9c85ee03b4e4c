"""GF(65497) arithmetic against hand-computed values and a naive big-integer Lagrange interpolation."""

import numpy as np
import pytest

from swarmrl.toploc.errors import HiddenStatesError
from swarmrl.toploc.field import FIELD_PRIME, _reduce, evaluate, injective_moduli, interpolate, inverse_table

P = FIELD_PRIME


def test_field_prime_is_prime():
    assert all(P % d for d in range(2, int(P**0.5) + 1))


def test_inverse_table_hand_values():
    inv = inverse_table()
    assert inv[1] == 1
    assert inv[2] == 32749  # 2 * 32749 = 65498 = p + 1
    assert inv[P - 1] == P - 1  # (-1)^-1 = -1
    sample = np.arange(1, P, 997)
    assert np.all(sample * inv[sample] % P == 1)


def test_interpolate_quadratic_by_hand():
    # (0,1), (1,3), (2,7) lie on 1 + x + x^2.
    coefficients = interpolate(np.array([[0, 1, 2]]), np.array([[1, 3, 7]]))
    assert coefficients.tolist() == [[1, 1, 1]]


def test_interpolate_line_needing_an_inverse_by_hand():
    # Through (1, 0) and (3, 1): P(x) = (x - 1)/2, and 1/2 = 32749 in GF(65497), so c0 = -32749 = 32748.
    coefficients = interpolate(np.array([[1, 3]]), np.array([[0, 1]]))
    assert coefficients.tolist() == [[32748, 32749]]


def test_interpolation_order_of_points_does_not_matter():
    x = np.array([[5, 17, 4, 60000, 12345]])
    y = np.array([[9, 65000, 0, 1, 32767]])
    order = np.array([3, 0, 4, 1, 2])
    assert np.array_equal(interpolate(x, y), interpolate(x[:, order], y[:, order]))


def _lagrange(xs: list[int], ys: list[int]) -> list[int]:
    """Naive O(k^3) Lagrange interpolation with Python integers, as an independent check."""
    result = [0] * len(xs)
    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        basis = [1]
        denominator = 1
        for j, xj in enumerate(xs):
            if j == i:
                continue
            basis = [(a - xj * b) % P for a, b in zip([0, *basis], [*basis, 0], strict=True)]
            denominator = denominator * (xi - xj) % P
        scale = yi * pow(denominator, P - 2, P) % P
        result = [(r + scale * b) % P for r, b in zip(result, basis, strict=True)]
    return result


def test_interpolate_matches_naive_lagrange_batched():
    rng = np.random.default_rng(0)
    rows = [rng.choice(P, size=12, replace=False) for _ in range(3)]
    x = np.stack(rows)
    y = rng.integers(0, P, size=x.shape)
    coefficients = interpolate(x, y)
    for row in range(3):
        assert coefficients[row].tolist() == _lagrange(x[row].tolist(), y[row].tolist())


def test_evaluate_hand_values_and_round_trip():
    assert evaluate(np.array([[1, 1, 1]]), np.array([[0, 10, 2]])).tolist() == [[1, 111, 7]]
    rng = np.random.default_rng(1)
    x = np.stack([rng.choice(P, size=128, replace=False) for _ in range(4)])
    y = rng.integers(0, 0xFF80, size=x.shape)
    assert np.array_equal(evaluate(interpolate(x, y), x), y)


def test_evaluate_reduces_points_into_the_field():
    coefficients = np.array([[3, 2]])  # 3 + 2x
    assert evaluate(coefficients, np.array([[P + 5]])).tolist() == [[13]]


def test_injective_modulus_by_hand():
    # m = 65497: 0 and 65497 collide; 65496: 0 and 2·65496 collide; 65495: 65497 -> 2 and 130992 -> 2 collide;
    # 65494: residues 0, 3, 4 are distinct.
    moduli = injective_moduli(np.array([[0, 65497, 2 * 65496], [1, 2, 3]]))
    assert moduli.tolist() == [65494, 65497]


def test_injective_modulus_is_the_first_from_the_top():
    rng = np.random.default_rng(2)
    indices = np.stack([rng.choice(32 * 8192, size=128, replace=False) for _ in range(6)])
    for row, modulus in zip(indices, injective_moduli(indices), strict=True):
        assert len(set((row % modulus).tolist())) == 128
        for larger in range(int(modulus) + 1, P + 1):
            assert len(set((row % larger).tolist())) < 128


def test_no_injective_modulus_raises():
    # Two equal indices collide under every modulus.
    with pytest.raises(HiddenStatesError, match="no modulus"):
        injective_moduli(np.array([[7, 7]]))


def test_float_reduction_is_exact_over_its_whole_range():
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            rng.integers(-(2**40), 2**40, size=100_000),
            np.arange(-3, 4) * P,  # exact multiples, where a rounded quotient would be off by one
            np.arange(-3, 4) * P - 1,
            np.array([P * P - 1, -(P * P) + 1, 2**40 - 1, -(2**40) + 1]),
        ]
    )
    assert np.array_equal(_reduce(values.astype(np.float64)).astype(np.int64), values % P)
