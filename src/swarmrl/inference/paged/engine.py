"""The paged engine: continuous batching over a paged KV cache, one prefill per distinct prompt.

Each step is either a prefill (admitting waiting work) or one decoding step for every running sequence;
a sequence that stops leaves at once and the next step refills its row. Token choices are seeded
(`sampler`): token i of a completion is a function of (seed, i, the logits that produced it) alone, so the
batch a sequence ran in, its neighbours and the order of requests change nothing the validator replays.
Hidden states of every fed position are kept in the pool (bf16) and read back through the block table when
the sequence finishes: completion token i's is position P − 1 + i's, as in the validator's prefill.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference.checks import check_requests, eos_token_ids, new_token_limit, stop_ids
from swarmrl.inference.engine import Generation, GenerationRequest, SamplingParams
from swarmrl.inference.errors import InvalidRequestError
from swarmrl.inference.live_weights import LiveWeights
from swarmrl.inference.paged.block_manager import BlockManager
from swarmrl.inference.paged.model_runner import ModelRunner
from swarmrl.inference.paged.scheduler import PrefillStep, Scheduler, SchedulerStats
from swarmrl.inference.paged.sequence import PromptGroup
from swarmrl.inference.paged.sequence import Sequence as Seq

# (request index, sampled token, its logprob) -> end that completion now?
TokenCallback = Callable[[int, int, float], bool]


@dataclass
class StepTiming:
    """Wall time of the last `generate` by step kind (each step ends on a host sync, so times are exact)."""

    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_rows: int = 0  # tokens sampled by decoding steps (their batch sizes summed)


class PagedEngine(LiveWeights):
    """`InferenceEngine` over a Llama-family HF causal LM held in memory (puts the model in eval mode).

    It runs the HF model's own parameter tensors (no fused or re-laid-out copies), so new weights copied into
    them (`load_weights`, `update_weights`) are what the next step and every captured CUDA graph read.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        config: PagedEngineConfig | None = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
        policy_step: int = 0,
    ) -> None:
        self.model = model.eval()
        self.config = config or PagedEngineConfig()
        self.policy_step = policy_step
        self.runner = ModelRunner(self.model, self.config)
        eos = eos_token_id if eos_token_id is not None else model.config.eos_token_id
        self.eos_token_ids = eos_token_ids(eos, self.runner.model.parts.vocab_size)
        self.last_stats = SchedulerStats()
        self.last_timing = StepTiming()
        self._init_live_weights()

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        params: SamplingParams,
        *,
        on_token: TokenCallback | None = None,
    ) -> list[Generation]:
        """`on_token(request index, token, logprob)` sees every token as it is sampled (a server streams them);
        returning True ends that completion there, with finish reason "stop" (a stop string it found)."""
        with self._generating():
            return self._generate(requests, params, on_token)

    @torch.inference_mode()
    def _generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, on_token: TokenCallback | None
    ) -> list[Generation]:
        check_requests(requests, params, self.runner.model.parts)
        blocks = BlockManager(self.runner.pool.num_blocks, self.runner.block_size)
        for index, request in enumerate(requests):
            # The most a sequence ever holds: every position but its last, plus one block while preempted
            # work is recomputed.
            limit = new_token_limit(request, params)
            need = blocks.blocks_for(len(request.prompt_ids) + limit) + 1
            if need > blocks.num_blocks:
                raise InvalidRequestError(
                    f"request {index}: {len(request.prompt_ids)} prompt + {limit} new tokens "
                    f"need {need} KV blocks, the cache holds {blocks.num_blocks}; grant the engine more memory"
                )
        scheduler = Scheduler(blocks, self.config.max_num_seqs, self.config.max_num_batched_tokens)
        scheduler.add(self._groups(requests))
        stops = set(stop_ids(self.eos_token_ids, params))
        limits = [new_token_limit(request, params) for request in requests]
        results: list[Generation | None] = [None] * len(requests)
        timing = StepTiming()
        while scheduler.has_work:
            started = time.perf_counter()
            step = scheduler.schedule()
            self.runner.pool.zero_through(blocks.highest_used)
            if isinstance(step, PrefillStep):
                sampled, logits = (
                    step.starts + [i.sequence for i in step.items if i.sequence],
                    self._prefill(step),
                )
            else:
                self.runner.copy_blocks(step.copies)
                sampled, logits = step.sequences, self.runner.decode(step.sequences)
            tokens, logprobs = self.runner.sample(
                logits, [s.seed for s in sampled], [len(s.completion_ids) for s in sampled], params
            )
            finished = []
            for sequence, token, logprob in zip(sampled, tokens, logprobs, strict=True):
                sequence.completion_ids.append(token)
                sequence.logprobs.append(logprob)
                asked = on_token is not None and on_token(sequence.index, token, logprob)
                if token in stops:
                    finished.append((sequence, "eos"))
                elif len(sequence.completion_ids) == limits[sequence.index]:
                    finished.append((sequence, "length"))
                elif asked:
                    finished.append((sequence, "stop"))
            if isinstance(step, PrefillStep):
                timing.prefill_seconds += time.perf_counter() - started
            else:
                timing.decode_seconds += time.perf_counter() - started
                timing.decode_rows += len(sampled)
            for sequence, reason in finished:
                results[sequence.index] = self._collect(sequence, reason)
                scheduler.finish(sequence, reason)
        self.last_stats, self.last_timing = scheduler.stats, timing
        return [r for r in results if r is not None]

    def _groups(self, requests: Sequence[GenerationRequest]) -> list[PromptGroup]:
        groups: dict[tuple[int, ...], PromptGroup] = {}
        ordered: list[PromptGroup] = []
        for index, request in enumerate(requests):
            key = tuple(request.prompt_ids) if self.config.share_prompts else (index,)
            if key not in groups:
                groups[key] = PromptGroup(prompt_ids=list(request.prompt_ids))
                ordered.append(groups[key])
            group = groups[key]
            group.pending.append(Seq(index, group.prompt_ids, request.seed, group))
        return ordered

    def _prefill(self, step: PrefillStep) -> torch.Tensor:
        """Logits [sampled rows, V] of a prefill step: starts draw from their group's last prompt state,
        recomputed sequences from their own last position."""
        recomputed: list[torch.Tensor] = []
        if step.items:
            for item, hidden in zip(step.items, self.runner.prefill(step.items), strict=True):
                if item.group is not None:
                    item.group.last_hidden = hidden
                else:
                    recomputed.append(hidden)
        # Members of a group share one state: the LM head runs once per distinct state.
        distinct: list[torch.Tensor] = []
        index_of: dict[int, int] = {}
        rows = []
        for hidden in [s.group.last_hidden for s in step.starts] + recomputed:
            if id(hidden) not in index_of:
                index_of[id(hidden)] = len(distinct)
                distinct.append(hidden)
            rows.append(index_of[id(hidden)])
        for sequence in step.starts:
            if sequence.group.table is None:  # every member has started: the state is no longer needed
                sequence.group.last_hidden = None
        logits = self.runner.logits(torch.stack(distinct))
        return logits[torch.tensor(rows, device=logits.device)]

    def _collect(self, sequence: Seq, reason: str) -> Generation:
        prompt_length, completion_length = len(sequence.prompt_ids), len(sequence.completion_ids)
        hidden = self.runner.hidden_states(
            sequence.table, prompt_length - 1, prompt_length - 1 + completion_length
        )
        prompt_hidden = None
        if self.config.capture_prompt_hidden_states:
            prompt_hidden = self.runner.hidden_states(sequence.table, 0, prompt_length)
        if self.config.hidden_states_device == "cpu":
            hidden = hidden.cpu()
            prompt_hidden = prompt_hidden.cpu() if prompt_hidden is not None else None
        return Generation(
            prompt_ids=list(sequence.prompt_ids),
            completion_ids=sequence.completion_ids,
            logprobs=sequence.logprobs,
            finish_reason=reason,
            seed=sequence.seed,
            policy_step=self.policy_step,
            hidden_states=hidden,
            prompt_hidden_states=prompt_hidden,
        )
