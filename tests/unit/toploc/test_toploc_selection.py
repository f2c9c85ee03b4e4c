"""Deterministic top-k by magnitude: |x| descending, then flat index ascending, even among bf16 ties."""

import torch

from swarmrl.toploc.selection import bf16_bits, top_magnitude_indices

torch.set_num_threads(1)


def _brute_force(values: torch.Tensor, k: int) -> list[list[int]]:
    result = []
    for row in values.float().abs().tolist():
        order = sorted(range(len(row)), key=lambda i: (-row[i], i))
        result.append(order[:k])
    return result


def test_hand_example_ties_broken_by_index():
    values = torch.tensor([[1.0, -2.0, 2.0, 0.5, -0.0, 3.0]], dtype=torch.bfloat16)
    assert top_magnitude_indices(bf16_bits(values), 3).tolist() == [[5, 1, 2]]


def test_matches_brute_force_with_many_ties_small_rows():
    generator = torch.Generator().manual_seed(0)
    values = torch.randint(-4, 5, (5, 300), generator=generator).to(torch.bfloat16)
    assert top_magnitude_indices(bf16_bits(values), 128).tolist() == _brute_force(values, 128)


def test_matches_brute_force_on_large_rows_using_group_bound():
    generator = torch.Generator().manual_seed(1)
    values = torch.randn(6, 32 * 512, generator=generator).to(torch.bfloat16)
    assert top_magnitude_indices(bf16_bits(values), 128).tolist() == _brute_force(values, 128)


def test_matches_brute_force_when_every_value_ties():
    values = torch.full((2, 32 * 64), -1.5, dtype=torch.bfloat16)
    assert top_magnitude_indices(bf16_bits(values), 128).tolist() == [list(range(128))] * 2


def test_outlier_dimensions_in_every_token():
    # Massive activations sit in the same few dims of every token (common in real LMs).
    generator = torch.Generator().manual_seed(2)
    values = torch.randn(32, 1024, generator=generator)
    values[:, [3, 700, 701]] = 40.0
    rows = values.to(torch.bfloat16).reshape(1, -1)
    assert top_magnitude_indices(bf16_bits(rows), 128).tolist() == _brute_force(rows, 128)
