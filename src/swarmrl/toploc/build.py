"""Prover side: commit to a completion's final hidden states, one 258-byte proof per chunk of tokens."""

from __future__ import annotations

import numpy as np
import torch

from swarmrl.toploc.encoding import DEFAULT_TOPK, encode_rows
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
    check_topk(topk)
    states = check_hidden_states(completion_hidden, prompt_hidden)
    count = len(
        chunk_spans(
            states.completion_bits.shape[0], chunk_size=chunk_size, commit_prompt=prompt_hidden is not None
        )
    )
    moduli = np.zeros(count, dtype=np.int64)
    coefficients = np.zeros((count, topk), dtype=np.int64)
    for points in select_points(states, chunk_size=chunk_size, topk=topk):
        chunk_moduli = injective_moduli(points.indices)
        moduli[points.proof_positions] = chunk_moduli
        k = points.indices.shape[1]
        coefficients[points.proof_positions, :k] = interpolate(
            points.indices % chunk_moduli[:, None], points.patterns
        )
    return encode_rows(moduli, coefficients)
