"""Batched seeded generation with a KV cache in plain PyTorch, for CPU workers, tests and the demo.

Prompts are left-padded so every row's next token sits in the last column; position ids count real tokens
only, so padding does not move any row's rotary phases. Rows that hit a stop token leave the batch (their
cache rows are dropped), so finished sequences cost nothing. Each token choice depends only on (seed,
completion position, that row's logits) — see `sampler` — hence on nothing about the batch it ran in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from swarmrl.configs.engine import TorchEngineConfig
from swarmrl.inference.checks import check_requests, eos_token_ids, new_token_limit, stop_ids
from swarmrl.inference.engine import HIDDEN_STATE_DTYPE, Generation, GenerationRequest, SamplingParams
from swarmrl.inference.kv_cache import PreallocatedLayer, generation_cache
from swarmrl.inference.lean_decode import LeanDecoder
from swarmrl.inference.live_weights import LiveWeights
from swarmrl.inference.lm_parts import padded_position_ids, split_causal_lm
from swarmrl.inference.sampler import choose
from swarmrl.models.lm_types import CausalLM


@dataclass
class _Outputs:
    """Per-request results, filled column by column as rows decode (rows are original request indices)."""

    tokens: torch.Tensor  # [B, steps] int64
    logprobs: torch.Tensor  # [B, steps] float32
    hidden_states: torch.Tensor  # [B, steps, H] bf16
    lengths: torch.Tensor  # [B] completion length so far / final
    stopped: torch.Tensor  # [B] bool, ended on a stop token

    @classmethod
    def empty(cls, batch: int, steps: int, hidden_size: int) -> _Outputs:
        return cls(
            tokens=torch.zeros((batch, steps), dtype=torch.long),
            logprobs=torch.zeros((batch, steps), dtype=torch.float32),
            hidden_states=torch.zeros((batch, steps, hidden_size), dtype=HIDDEN_STATE_DTYPE),
            lengths=torch.full((batch,), steps),
            stopped=torch.zeros(batch, dtype=torch.bool),
        )


class TorchEngine(LiveWeights):
    """`InferenceEngine` over a HF causal LM held in memory (puts the model in eval mode)."""

    model: CausalLM  # its transformers config sizes the generation cache

    def __init__(
        self,
        model: CausalLM,
        config: TorchEngineConfig | None = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
        policy_step: int = 0,
    ) -> None:
        self.model = model.eval()
        self.config = config or TorchEngineConfig()
        self.policy_step = policy_step
        self._parts = split_causal_lm(model)
        eos = eos_token_id if eos_token_id is not None else model.config.eos_token_id
        self.eos_token_ids = eos_token_ids(eos, self._parts.vocab_size)
        use_lean = self.config.decode_path == "lean" and LeanDecoder.supports(model)
        self._lean_decoder = LeanDecoder(model) if use_lean else None
        self._init_live_weights()

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Generation]:
        check_requests(requests, params, self._parts)
        size = self.config.max_batch_size
        generations: list[Generation] = []
        with self._generating():
            for start in range(0, len(requests), size):
                generations.extend(self._generate_batch(requests[start : start + size], params))
        return generations

    @torch.inference_mode()
    def _generate_batch(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Generation]:
        device = self._parts.head.weight.device
        limits = torch.tensor([new_token_limit(r, params) for r in requests])
        steps = int(limits.max())
        input_ids, attention_mask = _left_padded([r.prompt_ids for r in requests], device)
        cache = generation_cache(self.model.config, input_ids.shape[1] + steps)
        prompt_hidden = self._parts.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=padded_position_ids(attention_mask),
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state

        out = _Outputs.empty(len(requests), steps, self._parts.hidden_size)
        seeds = torch.tensor([r.seed for r in requests], dtype=torch.int64)
        stops = torch.tensor(stop_ids(self.eos_token_ids, params), dtype=torch.long, device=device)
        rows = torch.arange(len(requests))  # original index of each row still decoding
        next_position = attention_mask.sum(dim=1)
        hidden = prompt_hidden[:, -1]
        for step in range(steps):
            logits = self._parts.head(hidden)
            positions = torch.full((len(rows),), step)
            tokens, logprobs = choose(logits, seeds[rows], positions, params.temperature, params.top_p)
            out.tokens[rows, step] = tokens.cpu()
            out.logprobs[rows, step] = logprobs.cpu()
            out.hidden_states[rows, step] = hidden.to(HIDDEN_STATE_DTYPE).cpu()
            stopped = torch.isin(tokens, stops)
            done = stopped | (limits[rows] == step + 1).to(device)
            if done.any():
                out.lengths[rows[done.cpu()]] = step + 1
                out.stopped[rows[stopped.cpu()]] = True
                keep = (~done).nonzero().squeeze(1)
                if len(keep) == 0:
                    break
                cache.batch_select_indices(keep)
                rows, tokens = rows[keep.cpu()], tokens[keep]
                attention_mask, next_position = attention_mask[keep], next_position[keep]
            if step == steps - 1:
                break
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=1)
            hidden = self._decode(tokens, next_position, attention_mask, cache)
            next_position += 1
        return self._collect(requests, out, prompt_hidden)

    def _decode(
        self, tokens: torch.Tensor, positions: torch.Tensor, attention_mask: torch.Tensor, cache: DynamicCache
    ) -> torch.Tensor:
        """Final hidden states [B, H] after feeding one token per row."""
        preallocated = [layer for layer in cache.layers if isinstance(layer, PreallocatedLayer)]
        if self._lean_decoder is not None and len(preallocated) == len(cache.layers):
            return self._lean_decoder.step(tokens, positions, attention_mask, preallocated)
        return self._parts.backbone(
            input_ids=tokens[:, None],
            attention_mask=attention_mask,
            position_ids=positions[:, None],
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state[:, -1]

    def _collect(
        self, requests: Sequence[GenerationRequest], out: _Outputs, prompt_hidden: torch.Tensor
    ) -> list[Generation]:
        token_lists, logprob_lists = out.tokens.tolist(), out.logprobs.tolist()
        generations = []
        for row, request in enumerate(requests):
            length = int(out.lengths[row])
            prompt_states = None
            if self.config.capture_prompt_hidden_states:
                prompt_length = len(request.prompt_ids)  # left-padded: the prompt is the last columns
                prompt_states = prompt_hidden[row, -prompt_length:].to(HIDDEN_STATE_DTYPE).cpu()
            generations.append(
                Generation(
                    prompt_ids=list(request.prompt_ids),
                    completion_ids=token_lists[row][:length],
                    logprobs=logprob_lists[row][:length],
                    finish_reason="eos" if bool(out.stopped[row]) else "length",
                    seed=request.seed,
                    policy_step=self.policy_step,
                    hidden_states=out.hidden_states[row, :length].clone(),
                    prompt_hidden_states=prompt_states,
                )
            )
        return generations


def _left_padded(prompts: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.zeros((len(prompts), width), dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[row, width - len(prompt) :] = 1
    return input_ids.to(device), attention_mask.to(device)
