"""Shared pieces of the trainer tests: a tiny Qwen2, a padded batch, and scored rows of the same examples."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

from swarmrl.rollouts import ScoredRow

EXAMPLES = [([3, 4, 5], [6, 7, 8, 9]), ([10, 11], [12]), ([13], [14, 15, 16]), ([17, 18, 19, 20], [21, 22])]
ADVANTAGES = torch.tensor([1.0, -0.5, 0.8, -1.2])


def tiny_model(attn_implementation: str = "eager", seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation=attn_implementation,
    )
    return Qwen2ForCausalLM(config)


def padded_batch(
    examples: list[tuple[list[int], list[int]]] = EXAMPLES,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(c) for p, c in examples)
    input_ids = torch.zeros(len(examples), width, dtype=torch.long)
    attention = torch.zeros(len(examples), width, dtype=torch.long)
    completion = torch.zeros(len(examples), width - 1, dtype=torch.bool)
    for i, (prompt, comp) in enumerate(examples):
        input_ids[i, : len(prompt) + len(comp)] = torch.tensor(prompt + comp)
        attention[i, : len(prompt) + len(comp)] = 1
        completion[i, len(prompt) - 1 : len(prompt) + len(comp) - 1] = True
    return input_ids, attention, completion


def plain_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The trainer's path before chunking and packing: full [B, S-1, V] float32 log-softmax of padded rows."""
    logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float() / temperature
    log_probs = F.log_softmax(logits, dim=-1)
    chosen = log_probs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return chosen, -(log_probs.exp() * log_probs).sum(-1)


def scored_rows(
    examples: list[tuple[list[int], list[int]]] = EXAMPLES,
    advantages: list[float] | None = None,
    temperature: float = 0.7,
    seed: int = 0,
) -> list[ScoredRow]:
    """Rows as the trainer receives them; engine logprobs a little off so corrections have work to do."""
    generator = torch.Generator().manual_seed(seed)
    if advantages is None:
        advantages = [ADVANTAGES[i % len(ADVANTAGES)].item() for i in range(len(examples))]
    return [
        ScoredRow(
            prompt_ids=list(prompt),
            completion_ids=list(completion),
            policy_step=0,
            task_id="t",
            prompt_index=i,
            group_id=i,
            sample_seed=i,
            temperature=temperature,
            target_length=-1,
            # around log(1/64), a random tiny model's level: corrections keep some tokens, cut others
            logprobs=(-4.6 + torch.rand(len(completion), generator=generator)).tolist(),
            finish_reason="stop",
            advantage=advantages[i],
        )
        for i, (prompt, completion) in enumerate(examples)
    ]


def random_examples(count: int, seed: int = 0, vocab: int = 64) -> list[tuple[list[int], list[int]]]:
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(count):
        prompt_len = int(torch.randint(1, 6, (1,), generator=generator))
        completion_len = int(torch.randint(1, 8, (1,), generator=generator))
        ids = torch.randint(1, vocab, (prompt_len + completion_len,), generator=generator).tolist()
        examples.append((ids[:prompt_len], ids[prompt_len:]))
    return examples


def grouped_examples(
    prompts: int, group: int, seed: int = 0, vocab: int = 64
) -> list[tuple[list[int], list[int]]]:
    """GRPO-shaped examples: `group` completions of random lengths after each of `prompts` random prompts."""
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(prompts):
        prompt = torch.randint(
            1, vocab, (int(torch.randint(2, 7, (1,), generator=generator)),), generator=generator
        )
        for _ in range(group):
            length = int(torch.randint(1, 8, (1,), generator=generator))
            examples.append(
                (prompt.tolist(), torch.randint(1, vocab, (length,), generator=generator).tolist())
            )
    return examples
