"""Points selected where the states live (torch, any device) are the host's selection, bit for bit.

The proof depends on the set of (index, pattern) points, not their order, so sets are compared."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from swarmrl.toploc import HiddenStatesError, build_proofs_batch
from swarmrl.toploc.device_points import device_points
from swarmrl.toploc.layout import check_hidden_states
from swarmrl.toploc.points import select_points

torch.set_num_threads(1)


def _states(tokens: int, hidden: int, seed: int, ties: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if ties:  # bf16 ties are common: a handful of distinct magnitudes
        return torch.randint(-4, 5, (tokens, hidden), generator=generator).to(torch.bfloat16)
    return (torch.randn(tokens, hidden, generator=generator) * 3).to(torch.bfloat16)


@pytest.mark.parametrize(
    ("tokens", "hidden", "ties"), [(70, 64, False), (70, 64, True), (5, 8, True), (64, 96, False)]
)
@pytest.mark.parametrize("with_prompt", [False, True])
def test_device_selection_equals_the_host_selection(
    tokens: int, hidden: int, ties: bool, with_prompt: bool
) -> None:
    completion = _states(tokens, hidden, 0, ties)
    prompt = _states(9, hidden, 1, ties) if with_prompt else None
    host = select_points(check_hidden_states(completion, prompt), chunk_size=32, topk=128)
    device = device_points(completion, prompt, chunk_size=32, topk=128)
    assert len(host) == len(device)
    for a, b in zip(host, device, strict=True):
        assert np.array_equal(a.proof_positions, b.proof_positions)
        assert a.indices.dtype == b.indices.dtype == np.int64
        assert _point_set(a) == _point_set(b)


def _point_set(points) -> list[set[tuple[int, int]]]:
    return [
        set(zip(row_indices.tolist(), row_patterns.tolist(), strict=True))
        for row_indices, row_patterns in zip(points.indices, points.patterns, strict=True)
    ]


def test_ties_across_the_kth_place_take_the_references_choice_not_the_lowest_indices() -> None:
    """Every magnitude equal: the reference's CPU top-k does not keep the lowest indices (selection.py)."""
    completion = torch.full((32, 64), 1.5, dtype=torch.bfloat16)
    host = select_points(check_hidden_states(completion, None), chunk_size=32, topk=128)
    device = device_points(completion, None, chunk_size=32, topk=128)
    assert [_point_set(a) for a in host] == [_point_set(b) for b in device]
    assert {index for index, _ in _point_set(device[0])[0]} != set(range(128))


def test_float32_states_are_rounded_to_bf16_first() -> None:
    completion = torch.randn(40, 32)
    host = select_points(check_hidden_states(completion, None), chunk_size=32, topk=128)
    device = device_points(completion, None, chunk_size=32, topk=128)
    assert all(_point_set(a) == _point_set(b) for a, b in zip(host, device, strict=True))


@pytest.mark.parametrize(
    ("states", "message"),
    [
        (torch.zeros(0, 8), "empty"),
        (torch.zeros(8), "2-D"),
        (torch.zeros(4, 8, dtype=torch.int32), "floating"),
        (torch.full((4, 8), float("nan")), "NaN"),
    ],
)
def test_unusable_states_raise(states: torch.Tensor, message: str) -> None:
    with pytest.raises(HiddenStatesError, match=message):
        device_points(states, None, chunk_size=32, topk=128)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_proofs_built_from_gpu_states_equal_the_hosts() -> None:
    completions = [_states(n, 1024, n, ties=n % 2 == 0) for n in (1, 31, 32, 100, 1024)]
    host = build_proofs_batch(completions)
    assert build_proofs_batch([c.cuda() for c in completions]) == host
