"""A request as the paged engine tracks it: its tokens, its block table, and the prompt group it came from."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Any


class SequenceState(enum.Enum):
    WAITING = "waiting"  # not started, or preempted (its KV was dropped and must be recomputed)
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class PromptGroup:
    """Requests that share one prompt: it is prefilled once and its blocks are shared by every member.

    While members are still waiting to start, the group holds its own reference to the prompt's blocks
    (`table`) and the final hidden state of the prompt's last position (`last_hidden`, the model's dtype),
    from which each member samples its first token with its own seed.
    """

    prompt_ids: list[int]
    pending: deque[Sequence] = field(default_factory=deque)  # members not started yet, in request order
    table: list[int] | None = None  # the prompt's blocks, held while members wait; None before the prefill
    last_hidden: Any = None


@dataclass(eq=False)
class Sequence:
    index: int  # position in the caller's request list
    prompt_ids: list[int]
    seed: int
    group: PromptGroup
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    table: list[int] = field(default_factory=list)
    state: SequenceState = SequenceState.WAITING
    finish_reason: str | None = None
    recompute: bool = False  # preempted: every token must be run through the model again

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    @property
    def token_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.completion_ids]
