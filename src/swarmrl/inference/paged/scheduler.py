"""What the paged engine runs next: a prefill step that admits waiting work, or one decoding step for every
running sequence.

Admission (continuous batching): whenever a running row finishes, the next step admits waiting work into its
place, in request order, so the batch never drains to its slowest row. A prompt group is prefilled once and
as many of its members start as there are free rows; the rest wait and start later from the same cached
prompt blocks without another prefill. Admission keeps one free block per running sequence in reserve (the
most one decoding step can take: a new block, or a private copy of a shared one), so the step after an
admission never has to preempt.

When a decoding step still runs out of blocks (sequences grew), the most recently admitted sequence is
preempted: its blocks are freed and it waits at the front of the queue to be recomputed by a prefill over all
its tokens, as vLLM and nano-vllm do. Pure bookkeeping over `BlockManager`; unit-tested on CPU.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from swarmrl.inference.errors import InferenceError
from swarmrl.inference.paged.block_manager import BlockCopy, BlockManager
from swarmrl.inference.paged.sequence import PromptGroup, Sequence, SequenceState


@dataclass
class PrefillItem:
    """Tokens run through the model from position 0 and written into `table`: a group's prompt, or every
    token of a preempted sequence (which then samples its next token from the last position)."""

    token_ids: list[int]
    table: list[int]
    group: PromptGroup | None = None
    sequence: Sequence | None = None


@dataclass
class PrefillStep:
    items: list[PrefillItem]
    starts: list[Sequence]  # sample their first token from `group.last_hidden`, in admission order


@dataclass
class DecodeStep:
    sequences: list[Sequence]  # each feeds its last token at position length − 1
    copies: list[BlockCopy]  # copy-on-write copies to make before the step writes anything


@dataclass
class SchedulerStats:
    prefill_steps: int = 0
    decode_steps: int = 0
    prefilled_tokens: int = 0
    preemptions: int = 0
    block_copies: int = 0


@dataclass
class Scheduler:
    blocks: BlockManager
    max_num_seqs: int
    max_num_batched_tokens: int
    running: list[Sequence] = field(default_factory=list)  # in admission order
    waiting: deque[PromptGroup | Sequence] = field(default_factory=deque)  # groups, and preempted sequences
    stats: SchedulerStats = field(default_factory=SchedulerStats)

    def add(self, groups: Iterable[PromptGroup]) -> None:
        self.waiting.extend(group for group in groups if group.pending)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> PrefillStep | DecodeStep:
        step = self._admit()
        if step is None and not self.running:
            self._evict_cached_prompts()
            step = self._admit()
            if step is None:
                raise InferenceError(
                    f"nothing fits: {self.blocks.num_free} free KV blocks of {self.blocks.block_size} slots "
                    "cannot hold the next waiting request"
                )
        return step if step is not None else self._decode()

    def finish(self, sequence: Sequence, reason: str) -> None:
        self.blocks.free(sequence.table)
        sequence.table = []
        sequence.state, sequence.finish_reason = SequenceState.FINISHED, reason
        self.running.remove(sequence)

    def _admit(self) -> PrefillStep | None:
        items: list[PrefillItem] = []
        starts: list[Sequence] = []
        tokens_left = self.max_num_batched_tokens
        while self.waiting and len(self.running) < self.max_num_seqs:
            # Blocks not promised to running sequences for their next step.
            spare = self.blocks.num_free - len(self.running)
            entry = self.waiting[0]
            if isinstance(entry, Sequence):
                tokens = entry.length
                if (items and tokens > tokens_left) or self.blocks.blocks_for(tokens) + 1 > spare:
                    break
                entry.table = self.blocks.allocate(tokens)
                entry.recompute = False
                items.append(PrefillItem(entry.token_ids, entry.table, sequence=entry))
                self._start(entry)
                self.waiting.popleft()
                tokens_left -= tokens
                continue
            table = entry.table
            needs_prefill = table is None
            tokens = len(entry.prompt_ids) if needs_prefill else 0
            prompt_blocks = self.blocks.blocks_for(tokens)
            count = min(self.max_num_seqs - len(self.running), len(entry.pending), spare - prompt_blocks)
            if (items and tokens > tokens_left) or count < 1:
                break
            if table is None:
                table = entry.table = self.blocks.allocate(tokens)
                entry.last_hidden = None
                items.append(PrefillItem(entry.prompt_ids, table, group=entry))
                tokens_left -= tokens
            for _ in range(count):
                member = entry.pending.popleft()
                member.table = self.blocks.share(table)
                self._start(member)
                starts.append(member)
            if not entry.pending:
                self.blocks.free(table)  # every member holds the prompt's blocks now
                entry.table = None
                self.waiting.popleft()
        if not items and not starts:
            return None
        self.stats.prefill_steps += 1
        self.stats.prefilled_tokens += sum(len(item.token_ids) for item in items)
        return PrefillStep(items, starts)

    def _decode(self) -> DecodeStep:
        scheduled: list[Sequence] = []
        copies: list[BlockCopy] = []
        for sequence in list(self.running):
            if sequence.state is not SequenceState.RUNNING:
                continue  # preempted earlier in this loop
            position = sequence.length - 1
            while self.blocks.append_cost(sequence.table, position) > self.blocks.num_free:
                victim = self.running[-1]  # admitted last, so never one already scheduled this step
                self._preempt(victim)
                if victim is sequence:
                    break
            if sequence.state is SequenceState.RUNNING:
                copy = self.blocks.prepare_write(sequence.table, position)
                if copy is not None:
                    copies.append(copy)
                scheduled.append(sequence)
        self.stats.decode_steps += 1
        self.stats.block_copies += len(copies)
        return DecodeStep(scheduled, copies)

    def _start(self, sequence: Sequence) -> None:
        sequence.state = SequenceState.RUNNING
        self.running.append(sequence)

    def _preempt(self, sequence: Sequence) -> None:
        self.blocks.free(sequence.table)
        sequence.table = []
        sequence.state, sequence.recompute = SequenceState.WAITING, True
        self.running.remove(sequence)
        self.waiting.appendleft(sequence)
        self.stats.preemptions += 1

    def _evict_cached_prompts(self) -> None:
        """Drop the blocks of prompts whose members wait; they are prefilled again when admitted."""
        for entry in self.waiting:
            if isinstance(entry, PromptGroup) and entry.table is not None:
                self.blocks.free(entry.table)
                entry.table, entry.last_hidden = None, None
