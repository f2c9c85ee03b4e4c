"""Points selected where the states live (torch, any device) equal the host's numpy selection, bit for bit."""

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
        assert np.array_equal(a.indices, b.indices) and a.indices.dtype == b.indices.dtype == np.int64
        assert np.array_equal(a.patterns, b.patterns)


def test_float32_states_are_rounded_to_bf16_first() -> None:
    completion = torch.randn(40, 32)
    host = select_points(check_hidden_states(completion, None), chunk_size=32, topk=128)
    device = device_points(completion, None, chunk_size=32, topk=128)
    assert all(np.array_equal(a.patterns, b.patterns) for a, b in zip(host, device, strict=True))


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
