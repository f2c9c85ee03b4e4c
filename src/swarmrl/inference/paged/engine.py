"""The paged engine: continuous batching over a paged KV cache, one prefill per distinct prompt.

Each step is either a prefill (admitting waiting work) or one decoding step for every running sequence;
a sequence that stops leaves at once and the next step refills its row. Token choices are seeded
(`sampler`): token i of a completion is a function of (seed, i, the logits that produced it) alone, so the
batch a sequence ran in, its neighbours and the order of requests change nothing the validator replays.
Hidden states of every fed position are kept in the pool (bf16) and read back through the block table when
the sequence finishes: completion token i's is position P − 1 + i's, as in the validator's prefill.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference.checks import eos_token_ids
from swarmrl.inference.engine import FinishReason, Generation, GenerationRequest, SamplingParams
from swarmrl.inference.live_weights import LiveWeights
from swarmrl.inference.paged.model_runner import ModelRunner
from swarmrl.inference.paged.running import Row, RunningBatch, SampledToken, StepTiming
from swarmrl.inference.paged.scheduler import PrefillStep, SchedulerStats
from swarmrl.inference.paged.sequence import Sequence as Seq
from swarmrl.models.lm_types import CausalLM

# (request index, sampled token, its logprob) -> end that completion now?
TokenCallback = Callable[[int, int, float], bool]


class PagedEngine(LiveWeights):
    """`InferenceEngine` over a Llama-family HF causal LM held in memory (puts the model in eval mode).

    It runs the HF model's own parameter tensors (no fused or re-laid-out copies), so new weights copied into
    them (`load_weights`, `update_weights`) are what the next step and every captured CUDA graph read.
    """

    def __init__(
        self,
        model: CausalLM,
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

    @contextmanager
    def running(self) -> Iterator[RunningBatch]:
        """A batch that requests join while it runs (a server's); weights cannot change while it is open.
        Its steps must run under `torch.inference_mode()`."""
        with self._generating():
            batch = self._batch()
            try:
                yield batch
            finally:
                self.last_stats, self.last_timing = batch.stats, batch.timing

    @torch.inference_mode()
    def _generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, on_token: TokenCallback | None
    ) -> list[Generation]:
        batch = self._batch()
        rows = (
            [Row(on_token=_calling(on_token, index)) for index in range(len(requests))] if on_token else None
        )
        batch.add(requests, params, rows)
        results: list[Generation | None] = [None] * len(requests)

        def collect(sequence: Seq, reason: FinishReason) -> None:
            results[sequence.index] = self._collect(sequence, reason)

        while batch.has_work:
            batch.step(collect)
        self.last_stats, self.last_timing = batch.stats, batch.timing
        return [r for r in results if r is not None]

    def _batch(self) -> RunningBatch:
        return RunningBatch(self.runner, self.config, self.eos_token_ids, self.prefill_logits)

    def prefill_logits(self, step: PrefillStep) -> torch.Tensor:
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

    def _collect(self, sequence: Seq, reason: FinishReason) -> Generation:
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


def _calling(on_token: TokenCallback, index: int) -> Callable[[SampledToken], bool]:
    return lambda sampled: on_token(index, sampled.token, sampled.logprob)
