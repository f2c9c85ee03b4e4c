"""Real transformer states: a worker's KV-cache decode against a validator's one-shot prefill."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from swarmrl.toploc import build_proofs, split_prefill_hidden, verify_proofs

torch.set_num_threads(1)
PROMPT, NEW_TOKENS, HIDDEN = 12, 80, 256


def _model(seed: int, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=HIDDEN,
        intermediate_size=4 * HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


@torch.no_grad()
def _decode(model: LlamaForCausalLM, prompt: torch.Tensor) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """Greedy decode with a KV cache; returns tokens, prompt states [P, H] and completion states [C, H]."""
    out = model.model(prompt[None], use_cache=True)
    cache, prompt_states = out.past_key_values, out.last_hidden_state[0]
    states, tokens = [prompt_states[-1]], []
    for _ in range(NEW_TOKENS):
        tokens.append(int(model.lm_head(states[-1]).argmax()))
        if len(tokens) == NEW_TOKENS:
            break
        out = model.model(torch.tensor([[tokens[-1]]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        states.append(out.last_hidden_state[0, -1])
    return tokens, prompt_states, torch.stack(states)


@pytest.fixture(scope="module")
def worker_run():
    prompt = torch.randint(0, 512, (PROMPT,), generator=torch.Generator().manual_seed(3))
    tokens, prompt_states, completion_states = _decode(_model(0), prompt)
    proofs = build_proofs(completion_states, prompt_hidden=prompt_states)
    return prompt, tokens, proofs


@torch.no_grad()
def _validator_states(model: LlamaForCausalLM, prompt: torch.Tensor, tokens: list[int]):
    prefill = model.model(torch.cat([prompt, torch.tensor(tokens)])[None]).last_hidden_state[0]
    return split_prefill_hidden(prefill, PROMPT)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_validator_prefill_accepts_honest_decode(worker_run, dtype):
    prompt, tokens, proofs = worker_run
    prompt_states, completion_states = _validator_states(_model(0).to(dtype), prompt, tokens)
    report = verify_proofs(proofs, completion_states, prompt_hidden=prompt_states)
    assert report.ok, report.reason
    assert len(report.chunks) == 1 + 3


def test_other_weights_or_a_cheaper_model_are_rejected(worker_run):
    prompt, tokens, proofs = worker_run
    for model in (_model(1), _model(0, layers=1)):
        prompt_states, completion_states = _validator_states(model, prompt, tokens)
        report = verify_proofs(proofs, completion_states, prompt_hidden=prompt_states)
        assert not report.ok
        assert len(report.failed_chunks) == len(report.chunks)
