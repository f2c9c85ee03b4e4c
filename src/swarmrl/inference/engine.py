"""What every inference engine takes and returns, and the protocol the worker programs against."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import torch

from swarmrl.inference.errors import InvalidRequestError
from swarmrl.inference.sampler import check_sampling_params

# "stop": a caller's token callback ended the completion (a server's stop string); rollouts never hold it.
FinishReason = Literal["eos", "length", "stop"]
HIDDEN_STATE_DTYPE = torch.bfloat16  # TOPLOC commits to the bf16 bit patterns of the final hidden state


@dataclass(frozen=True)
class SamplingParams:
    """How to decode. Logprobs are always those of the sampling distribution (see `sampler`)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()  # in addition to the engine's EOS token
    ignore_eos: bool = False  # run every completion to its length (benchmarks); stop_token_ids still stop

    def __post_init__(self) -> None:
        check_sampling_params(self.temperature, self.top_p)
        if self.max_new_tokens < 1:
            raise InvalidRequestError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class GenerationRequest:
    """One completion to sample: the prompt and the seed every token choice is derived from."""

    prompt_ids: list[int]
    seed: int  # int64; every token choice is a function of (seed, completion position, logits)
    max_new_tokens: int | None = None  # this request's own limit, at most the sampling params' (None: theirs)


@dataclass
class Generation:
    """One sampled completion with everything a worker needs for its rollout row and TOPLOC proofs."""

    prompt_ids: list[int]
    completion_ids: list[int]  # includes the stop token when finish_reason is "eos"
    logprobs: list[float]  # per completion token, under the sampling distribution
    finish_reason: FinishReason
    seed: int
    policy_step: int  # the weights version that generated it
    # [len(completion), H] bf16: row i is the final hidden state (LM-head input) at the position that produced
    # completion token i, i.e. prompt position P-1 for token 0, then completion token i-1's position.
    hidden_states: torch.Tensor
    # [len(prompt), H] bf16 over every prompt position (its last row equals hidden_states[0]); only when asked.
    prompt_hidden_states: torch.Tensor | None = field(default=None, repr=False)


@runtime_checkable
class InferenceEngine(Protocol):
    """Generation with seeded sampling and hidden-state capture, on some policy version."""

    policy_step: int

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Generation]:
        """One `Generation` per request, in request order."""
        ...

    def load_weights(self, source: Mapping[str, torch.Tensor] | str | Path, *, policy_step: int) -> None:
        """Swap in new policy weights (a state dict or a checkpoint directory) and record their step."""
        ...


class LiveEngine(InferenceEngine, Protocol):
    """An engine whose weights a trainer in the same process streams in place (`inference.live_weights`)."""

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], step: int) -> None:
        """Copy the named tensors of policy `step` into the model's parameters, one at a time."""
        ...
