"""A batch of the paged engine that new requests join while it runs (continuous batching across callers).

`PagedEngine.generate` adds its requests to a fresh batch and steps it until every one has finished. A server
keeps one batch and adds each request as it arrives: the next step admits it into a free row (a prefill step)
and the decoding steps carry it alongside everything already running, so nobody waits for a batch to drain.

Rows may differ in how they are sampled. Rows that ask for nothing beyond temperature and top-p are sampled
by the runner exactly as rollouts are (`sampler.choose`); a step whose rows all share one setting — every
rollout batch — makes the one call a rollout batch always made. Rows with penalties, top-k, min-p, a token
mask or alternatives to report go through `processing` with the same seeded noise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference.checks import check_requests, new_token_limit, stop_ids
from swarmrl.inference.engine import FinishReason, GenerationRequest, SamplingParams
from swarmrl.inference.errors import InvalidRequestError
from swarmrl.inference.paged.block_manager import BlockManager
from swarmrl.inference.paged.model_runner import ModelRunner
from swarmrl.inference.paged.scheduler import PrefillStep, Scheduler, SchedulerStats
from swarmrl.inference.paged.sequence import PromptGroup
from swarmrl.inference.paged.sequence import Sequence as Seq
from swarmrl.inference.processing import (
    History,
    LogitsProcessing,
    choose_processed,
    processed_log_probs,
    top_alternatives,
)


@dataclass
class StepTiming:
    """Wall time of a batch's steps by kind (each step ends on a host sync, so times are exact)."""

    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_rows: int = 0  # tokens sampled by decoding steps (their batch sizes summed)


@dataclass(frozen=True)
class SampledToken:
    token: int
    logprob: float
    alternatives: tuple[tuple[int, float], ...] = ()  # the k most likely (token, logprob), when asked for


class TokenConstraint(Protocol):
    """Which tokens may come next (a grammar); told every token sampled under it."""

    def allowed(self, vocab_size: int) -> torch.Tensor:
        """[V] bool, True where a token may come next; never all False."""
        ...

    def advance(self, token: int) -> None: ...


@dataclass
class Row:
    """How one request is sampled beyond its `SamplingParams`, and who sees its tokens."""

    processing: LogitsProcessing = field(default_factory=LogitsProcessing)
    top_logprobs: int = 0
    constraint: TokenConstraint | None = None
    on_token: Callable[[SampledToken], bool] | None = None  # returns True to end the completion ("stop")

    @property
    def plain(self) -> bool:
        return self.processing.is_identity and self.constraint is None


@dataclass
class _Entry:
    params: SamplingParams
    row: Row
    limit: int
    stops: frozenset[int]

    def group_key(self) -> tuple[float, float, bool, LogitsProcessing]:
        return (self.params.temperature, self.params.top_p, self.row.plain, self.row.processing)


class RunningBatch:
    """Requests in flight on one engine (`PagedEngine.running`); not thread-safe (one thread adds and steps)."""

    def __init__(
        self,
        runner: ModelRunner,
        config: PagedEngineConfig,
        eos_token_ids: tuple[int, ...],
        prefill_logits: Callable[[PrefillStep], torch.Tensor],
    ) -> None:
        self.runner, self.config, self.eos_token_ids = runner, config, eos_token_ids
        self._prefill_logits = prefill_logits
        self.blocks = BlockManager(runner.pool.num_blocks, runner.block_size)
        self.scheduler = Scheduler(self.blocks, config.max_num_seqs, config.max_num_batched_tokens)
        self.timing = StepTiming()
        self._entries: dict[int, _Entry] = {}
        self._next_index = 0

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    @property
    def waiting(self) -> int:
        """Requests not yet in a row."""
        return sum(len(e.pending) if isinstance(e, PromptGroup) else 1 for e in self.scheduler.waiting)

    @property
    def running(self) -> int:
        return len(self.scheduler.running)

    @property
    def stats(self) -> SchedulerStats:
        return self.scheduler.stats

    def add(
        self,
        requests: Sequence[GenerationRequest],
        params: SamplingParams,
        rows: Sequence[Row] | None = None,
    ) -> list[int]:
        """Queue `requests` (checked first: nothing is queued if one is refused); their sequence indices."""
        check_requests(requests, params, self.runner.model.parts)
        for position, request in enumerate(requests):
            # The most a sequence ever holds: every position but its last, plus one block while preempted
            # work is recomputed.
            limit = new_token_limit(request, params)
            need = self.blocks.blocks_for(len(request.prompt_ids) + limit) + 1
            if need > self.blocks.num_blocks:
                raise InvalidRequestError(
                    f"request {position}: {len(request.prompt_ids)} prompt + {limit} new tokens "
                    f"need {need} KV blocks, the cache holds {self.blocks.num_blocks}; grant the engine more memory"
                )
        rows = rows if rows is not None else [Row() for _ in requests]
        stops = frozenset(stop_ids(self.eos_token_ids, params))
        indices = list(range(self._next_index, self._next_index + len(requests)))
        self._next_index += len(requests)
        for index, request, row in zip(indices, requests, rows, strict=True):
            self._entries[index] = _Entry(params, row, new_token_limit(request, params), stops)
        self.scheduler.add(self._groups(indices, requests))
        return indices

    def step(
        self, on_finish: Callable[[Seq, FinishReason], None] | None = None
    ) -> list[tuple[Seq, FinishReason]]:
        """One prefill or decoding step; the sequences it finished, with their finish reasons. `on_finish` sees
        each while its blocks still hold its hidden states."""
        scheduler = self.scheduler
        started = time.perf_counter()
        step = scheduler.schedule()
        self.runner.pool.zero_through(self.blocks.highest_used)
        if isinstance(step, PrefillStep):
            sampled = step.starts + [i.sequence for i in step.items if i.sequence]
            logits = self._prefill_logits(step)
        else:
            self.runner.copy_blocks(step.copies)
            sampled, logits = step.sequences, self.runner.decode(step.sequences)
        finished: list[tuple[Seq, FinishReason]] = []
        for sequence, choice in zip(sampled, self._sample(sampled, logits), strict=True):
            entry = self._entries[sequence.index]
            sequence.completion_ids.append(choice.token)
            sequence.logprobs.append(choice.logprob)
            if entry.row.constraint is not None:
                entry.row.constraint.advance(choice.token)
            asked = entry.row.on_token is not None and entry.row.on_token(choice)
            if choice.token in entry.stops:
                finished.append((sequence, "eos"))
            elif len(sequence.completion_ids) == entry.limit:
                finished.append((sequence, "length"))
            elif asked:
                finished.append((sequence, "stop"))
        if isinstance(step, PrefillStep):
            self.timing.prefill_seconds += time.perf_counter() - started
        else:
            self.timing.decode_seconds += time.perf_counter() - started
            self.timing.decode_rows += len(sampled)
        for sequence, reason in finished:
            if on_finish is not None:
                on_finish(sequence, reason)
            scheduler.finish(sequence, reason)
            del self._entries[sequence.index]
        return finished

    def _groups(self, indices: Sequence[int], requests: Sequence[GenerationRequest]) -> list[PromptGroup]:
        groups: dict[tuple[int, ...], PromptGroup] = {}
        ordered: list[PromptGroup] = []
        for index, request in zip(indices, requests, strict=True):
            key = tuple(request.prompt_ids) if self.config.share_prompts else (index,)
            if key not in groups:
                groups[key] = PromptGroup(prompt_ids=list(request.prompt_ids))
                ordered.append(groups[key])
            group = groups[key]
            group.pending.append(Seq(index, group.prompt_ids, request.seed, group))
        return ordered

    def _sample(self, sampled: Sequence[Seq], logits: torch.Tensor) -> list[SampledToken]:
        """Each row's choice; rows grouped by how they are sampled, one call per group."""
        groups: dict[tuple, list[int]] = {}
        for row, sequence in enumerate(sampled):
            groups.setdefault(self._entries[sequence.index].group_key(), []).append(row)
        choices: list[SampledToken | None] = [None] * len(sampled)
        for rows in groups.values():
            # One group (every rollout step): the runner samples the step's logits as they are.
            part = logits if len(groups) == 1 else logits[torch.tensor(rows, device=logits.device)]
            for row, choice in zip(rows, self._sample_group([sampled[r] for r in rows], part), strict=True):
                choices[row] = choice
        chosen = [choice for choice in choices if choice is not None]
        assert len(chosen) == len(choices)  # every row belongs to a group
        return chosen

    def _sample_group(self, sequences: Sequence[Seq], logits: torch.Tensor) -> list[SampledToken]:
        entries = [self._entries[s.index] for s in sequences]
        first = entries[0]
        seeds = [s.seed for s in sequences]
        positions = [len(s.completion_ids) for s in sequences]
        wanted = max(e.row.top_logprobs for e in entries)
        if first.row.plain:
            tokens, logprobs = self.runner.sample(logits, seeds, positions, first.params)
            if not wanted:
                return [SampledToken(t, lp) for t, lp in zip(tokens, logprobs, strict=True)]
        log_probs = processed_log_probs(
            logits,
            first.params.temperature,
            first.params.top_p,
            first.row.processing,
            [History(s.prompt_ids, s.completion_ids) for s in sequences],
            self._allowed(entries, logits),
        )
        if not first.row.plain:
            chosen, chosen_lp = choose_processed(log_probs, seeds, positions, first.params.temperature)
            tokens, logprobs = chosen.tolist(), chosen_lp.double().tolist()
        alternatives = top_alternatives(log_probs, wanted)
        return [
            SampledToken(t, lp, tuple(alts[: e.row.top_logprobs]))
            for t, lp, alts, e in zip(tokens, logprobs, alternatives, entries, strict=True)
        ]

    @staticmethod
    def _allowed(entries: Sequence[_Entry], logits: torch.Tensor) -> torch.Tensor | None:
        constraints = [e.row.constraint for e in entries]
        if all(c is None for c in constraints):
            return None
        vocab = logits.shape[-1]
        masks = [
            c.allowed(vocab) if c is not None else torch.ones(vocab, dtype=torch.bool) for c in constraints
        ]
        return torch.stack(masks).to(logits.device)
