"""Checks every engine makes before generating: requests it can honour, and stop tokens it can see."""

from __future__ import annotations

from collections.abc import Sequence

from swarmrl.inference.engine import GenerationRequest, SamplingParams
from swarmrl.inference.errors import InvalidRequestError
from swarmrl.inference.lm_parts import CausalLMParts

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def eos_token_ids(eos: int | Sequence[int] | None, vocab_size: int) -> tuple[int, ...]:
    """The engine's EOS ids (one id or several, as HF configs give them), each inside the vocabulary."""
    ids = (eos,) if isinstance(eos, int) else tuple(eos or ())
    if not ids or not all(isinstance(t, int) and 0 <= t < vocab_size for t in ids):
        raise InvalidRequestError(f"the engine needs EOS token ids inside the vocabulary, got {eos!r}")
    return ids


def stop_ids(eos_ids: tuple[int, ...], params: SamplingParams) -> tuple[int, ...]:
    """Token ids that end a completion under `params`."""
    return tuple(sorted({*([] if params.ignore_eos else eos_ids), *params.stop_token_ids}))


def new_token_limit(request: GenerationRequest, params: SamplingParams) -> int:
    return request.max_new_tokens if request.max_new_tokens is not None else params.max_new_tokens


def check_requests(
    requests: Sequence[GenerationRequest], params: SamplingParams, parts: CausalLMParts
) -> None:
    vocab, max_positions = parts.vocab_size, parts.max_positions
    for index, request in enumerate(requests):
        ids = request.prompt_ids
        if len(ids) == 0:
            raise InvalidRequestError(f"request {index}: empty prompt")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise InvalidRequestError(f"request {index}: prompt token ids must be ints")
        if min(ids) < 0 or max(ids) >= vocab:
            raise InvalidRequestError(f"request {index}: prompt token id outside the vocabulary [0, {vocab})")
        if not _INT64_MIN <= request.seed <= _INT64_MAX:
            raise InvalidRequestError(f"request {index}: seed {request.seed} does not fit in int64")
        if request.max_new_tokens is not None and not 1 <= request.max_new_tokens <= params.max_new_tokens:
            raise InvalidRequestError(
                f"request {index}: max_new_tokens {request.max_new_tokens} outside [1, {params.max_new_tokens}]"
            )
        # The request's own limit: a multi-turn row's later turns carry a long prefix and a budget cut to fit.
        limit = new_token_limit(request, params)
        if max_positions is not None and len(ids) + limit > max_positions:
            raise InvalidRequestError(
                f"request {index}: {len(ids)} prompt + {limit} new tokens exceed the model's "
                f"{max_positions} positions"
            )
    if any(not 0 <= token < vocab for token in params.stop_token_ids):
        raise InvalidRequestError(f"stop token ids {params.stop_token_ids} outside the vocabulary")
