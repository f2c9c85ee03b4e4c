"""Top-k by magnitude with the reference's choice among equal magnitudes (torch's CPU topk: libstdc++
std::partial_sort when 64·k <= n, std::nth_element otherwise), not "lowest index first"."""

import random

import numpy as np
import pytest
import torch

from swarmrl.toploc.selection import bf16_bits, top_magnitude_indices

torch.set_num_threads(1)


def _heap_select(values: list[int], k: int) -> list[int]:
    """libstdc++'s std::partial_sort(first, first + k, last, greater) on indices, written out: a heap of the
    first k (its top the smallest), each later element admitted only if strictly larger than the top
    (__heap_select), then __sort_heap. Mirrors __make_heap / __adjust_heap / __push_heap step for step."""
    heap = list(range(k))

    def greater(a: int, b: int) -> bool:
        return values[a] > values[b]

    def adjust(hole: int, length: int, item: int) -> None:
        top = child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if greater(heap[child], heap[child - 1]):
                child -= 1
            heap[hole], hole = heap[child], child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            heap[hole], hole = heap[child - 1], child - 1
        parent = (hole - 1) // 2
        while hole > top and greater(heap[parent], item):
            heap[hole], hole = heap[parent], parent
            parent = (hole - 1) // 2
        heap[hole] = item

    for parent in range((k - 2) // 2, -1, -1):
        adjust(parent, k, heap[parent])
    for i in range(k, len(values)):
        if greater(i, heap[0]):
            adjust(0, k, i)
    for end in range(k - 1, 0, -1):
        item, heap[end] = heap[end], heap[0]
        adjust(0, end, item)
    return heap


def test_hand_example_a_later_tie_beats_the_first():
    # k = 3 of 192 values (64·k <= n: heap select). The heap starts as indices [2, 1, 0] (all 1.5; make_heap
    # moves the last child up), 3.0 at index 3 evicts the top (index 2), -3.0 at index 4 evicts the new top,
    # which is index 0: the surviving 1.5 is index 1, where "lowest index first" would keep index 0.
    values = torch.tensor([[1.5, -1.5, 1.5, 3.0, -3.0] + [0.25] * 187], dtype=torch.bfloat16)
    assert top_magnitude_indices(bf16_bits(values), 3).tolist() == [[3, 4, 1]]
    assert _heap_select([3, 3, 3, 6, 6] + [1] * 187, 3) == [3, 4, 1]


@pytest.mark.parametrize("k", [1, 2, 3, 8, 128])
def test_matches_libstdcxx_heap_select_on_tied_rows(k):
    rng = random.Random(k)
    for _ in range(4):
        n = 64 * k + rng.randrange(0, 500)
        magnitudes = [rng.randrange(0, rng.choice([3, 20, 300])) for _ in range(n)]
        bits = np.array([magnitudes], dtype=np.int16) | np.int16(-0x8000) * rng.randrange(2)  # sign ignored
        assert top_magnitude_indices(bits, k).tolist() == [_heap_select(magnitudes, k)]


def _reference_choice(rows: torch.Tensor, k: int) -> list[list[int]]:
    """What toploc 0.1.6 commits to for each flattened chunk: `flat.abs().topk(k).indices` on bf16."""
    return [row.abs().topk(k).indices.tolist() for row in rows]


@pytest.mark.parametrize(
    ("rows", "n"),
    [(3, 32 * 64), (2, 6 * 1024), (2, 32 * 256), (2, 32 * 896), (2, 32 * 1024), (1, 32 * 4096)],
)
def test_same_indices_as_the_reference_on_plain_bf16_states(rows, n):
    # Both torch paths: n < 64·128 = 8192 (nth_element: small hidden sizes, short last chunks) and above.
    generator = torch.Generator().manual_seed(n)
    values = (torch.randn(rows, n, generator=generator) * 3).to(torch.bfloat16)
    assert top_magnitude_indices(bf16_bits(values), 128).tolist() == _reference_choice(values, 128)


def test_same_indices_as_the_reference_when_every_magnitude_ties():
    generator = torch.Generator().manual_seed(3)
    for n in (32 * 64, 32 * 512):
        signs = torch.randint(0, 2, (2, n), generator=generator) * 2 - 1
        values = (1.5 * signs).to(torch.bfloat16)
        assert top_magnitude_indices(bf16_bits(values), 128).tolist() == _reference_choice(values, 128)


def test_same_indices_as_the_reference_with_outlier_dimensions_in_every_token():
    # Massive activations sit in the same few dims of every token (common in real LMs): 96 tied values.
    generator = torch.Generator().manual_seed(2)
    values = torch.randn(32, 1024, generator=generator)
    values[:, [3, 700, 701]] = 40.0
    rows = values.to(torch.bfloat16).reshape(1, -1)
    assert top_magnitude_indices(bf16_bits(rows), 128).tolist() == _reference_choice(rows, 128)


def test_order_is_descending_magnitude():
    generator = torch.Generator().manual_seed(4)
    for n in (32 * 64, 32 * 1024):
        bits = bf16_bits((torch.randn(3, n, generator=generator) * 3).to(torch.bfloat16))
        magnitudes = np.take_along_axis(bits & 0x7FFF, top_magnitude_indices(bits, 128), axis=1)
        assert (np.diff(magnitudes, axis=1) <= 0).all()
