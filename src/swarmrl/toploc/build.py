"""Prover side: commit to a completion's final hidden states, one 258-byte proof per chunk of tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from swarmrl.toploc.device_points import device_points
from swarmrl.toploc.encoding import DEFAULT_TOPK, encode_rows
from swarmrl.toploc.errors import HiddenStatesError
from swarmrl.toploc.field import injective_moduli, interpolate
from swarmrl.toploc.layout import check_hidden_states, check_topk, chunk_spans
from swarmrl.toploc.points import select_points

DEFAULT_CHUNK_SIZE = 32


def build_proofs(
    completion_hidden: torch.Tensor,
    *,
    prompt_hidden: torch.Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
) -> list[bytes]:
    """One proof per chunk of `chunk_size` completion rows, preceded by one for the prompt if `prompt_hidden` is given.

    completion_hidden: [C, H] final hidden states (LM-head input), row i the state that produced token i;
    prompt_hidden: [P, H] states of the prompt positions, committed as one extra first chunk.
    Float tensors other than bf16 are rounded to bf16 first. A chunk with fewer than `topk` values commits to
    all of them (the polynomial's top coefficients are then zero). Raises HiddenStatesError (a ProofError) on
    empty, non-2-D, non-float or non-finite states — never returns placeholder proofs.
    """
    return build_proofs_batch(
        [completion_hidden],
        prompt_hidden=None if prompt_hidden is None else [prompt_hidden],
        chunk_size=chunk_size,
        topk=topk,
    )[0]


def build_proofs_batch(
    completion_hidden: Sequence[torch.Tensor],
    *,
    prompt_hidden: Sequence[torch.Tensor | None] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
) -> list[list[bytes]]:
    """`build_proofs` for many completions at once: the same bytes, with one interpolation for all chunks.

    Interpolation costs ~k vectorised passes whatever the number of chunks, so a worker proving a whole
    batch of short completions pays it once instead of once per completion.
    """
    check_topk(topk)
    prompts = list(prompt_hidden) if prompt_hidden is not None else [None] * len(completion_hidden)
    if len(prompts) != len(completion_hidden):
        raise HiddenStatesError(f"{len(prompts)} prompt states for {len(completion_hidden)} completions")
    counts: list[int] = []
    groups: dict[int, list] = {}
    for owner, (completion, prompt) in enumerate(zip(completion_hidden, prompts, strict=True)):
        on_device = isinstance(completion, torch.Tensor) and completion.is_cuda
        states = None if on_device else check_hidden_states(completion, prompt)
        tokens = completion.shape[0] if states is None else states.completion_bits.shape[0]
        counts.append(len(chunk_spans(tokens, chunk_size=chunk_size, commit_prompt=prompt is not None)))
        # States on a GPU are selected there: only the chunks' points cross to the host.
        selected = (
            device_points(completion, prompt, chunk_size=chunk_size, topk=topk)
            if states is None
            else select_points(states, chunk_size=chunk_size, topk=topk)
        )
        for points in selected:
            groups.setdefault(points.indices.shape[1], []).append((owner, points))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    moduli = np.zeros(int(offsets[-1]), dtype=np.int64)
    coefficients = np.zeros((int(offsets[-1]), topk), dtype=np.int64)
    for k, members in groups.items():
        rows = np.concatenate([offsets[owner] + points.proof_positions for owner, points in members])
        indices = np.concatenate([points.indices for _, points in members])
        patterns = np.concatenate([points.patterns for _, points in members])
        chunk_moduli = injective_moduli(indices)
        moduli[rows] = chunk_moduli
        coefficients[rows, :k] = interpolate(indices % chunk_moduli[:, None], patterns)
    encoded = encode_rows(moduli, coefficients)
    return [encoded[offsets[i] : offsets[i + 1]] for i in range(len(counts))]
