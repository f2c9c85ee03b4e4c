"""Trainer maths side by side with their anchors: loss cost, and packed vs padded training batches.

1. Loss: `swarmrl.trainer.losses.policy_loss` (INTELLECT-2 two-sided clip, δ cap, NaN guards, metrics)
   against the textbook masked PPO-clip GRPO loss most trainers write inline (TRL's formula), forward +
   backward on [B, T] logprobs.
2. Packing: one forward + backward of a tiny Qwen2 over variable-length sequences, right-padded to the
   longest (what the trainer did before it packed, and what TRL does) against first-fit-decreasing packed
   rows with the block-diagonal causal mask (what `trainer.batch.plan_step` feeds the train loop). Reports
   padding share and wall time.
3. LM head: token logprobs + entropy, forward + backward, through the plain full-vocabulary log-softmax
   (what the trainer did before) against `swarmrl.models.logprobs.token_logprobs` in chunks. Reports wall
   time and the largest tensor either path creates (forward and backward), measured with a dispatch mode.

Run: .venv/bin/python benchmarks/bench_trainer_loss_packing.py [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen2Config, Qwen2ForCausalLM

from swarmrl.configs.loss import LossConfig
from swarmrl.models.logprobs import token_logprobs
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.packing import block_causal_mask, pack_examples


def median_seconds(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def textbook_grpo_loss(logprobs, old_logprobs, advantages, mask, epsilon=0.2):
    ratio = torch.exp(logprobs - old_logprobs)
    advantages = advantages.unsqueeze(-1)
    per_token = -torch.min(ratio * advantages, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * advantages)
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()


def bench_loss(rows: int, width: int, repeats: int) -> None:
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(rows, width, generator=generator) * 3
    new = old + 0.1 * torch.randn(rows, width, generator=generator)
    lengths = torch.randint(width // 8, width + 1, (rows,), generator=generator)
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(-1)
    advantages = torch.randn(rows, generator=generator)
    config = LossConfig(normalisation="sequence")

    def anchor() -> None:
        logprobs = new.clone().requires_grad_(True)
        textbook_grpo_loss(logprobs, old, advantages, mask.float()).backward()

    def ours() -> None:
        logprobs = new.clone().requires_grad_(True)
        policy_loss(logprobs, old, advantages, mask, config=config).loss.backward()

    # Same value where the δ cap does not bind (ratios near 1): the two compute the same objective.
    check = new.clone()
    same = torch.allclose(
        textbook_grpo_loss(check, old, advantages, mask.float()),
        policy_loss(check, old, advantages, mask, config=config).loss,
        atol=1e-6,
    )
    anchor_s, ours_s = median_seconds(anchor, repeats), median_seconds(ours, repeats)
    print(f"loss fwd+bwd [{rows}x{width}]  values agree: {same}")
    print(f"  anchor (textbook PPO-clip GRPO)  {anchor_s * 1e3:8.2f} ms")
    print(
        f"  swarmrl policy_loss + metrics    {ours_s * 1e3:8.2f} ms   "
        f"ratio swarmrl/anchor {ours_s / anchor_s:.2f}x"
    )


def bench_packing(num_sequences: int, repeats: int) -> None:
    generator = torch.Generator().manual_seed(1)
    examples = []
    for _ in range(num_sequences):
        prompt_len = int(torch.randint(16, 65, (1,), generator=generator))
        # long-tailed completion lengths, as RL rollouts are
        completion_len = int(min(448, 8 + torch.empty(1).exponential_(1 / 80, generator=generator).item()))
        ids = torch.randint(1, 256, (prompt_len + completion_len,), generator=generator).tolist()
        examples.append((ids[:prompt_len], ids[prompt_len:]))
    longest = max(len(p) + len(c) for p, c in examples)
    capacity = 512

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=256,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            attn_implementation="sdpa",
        )
    )

    padded_ids = torch.zeros(num_sequences, longest, dtype=torch.long)
    padded_mask = torch.zeros(num_sequences, longest, dtype=torch.long)
    for i, (prompt, completion) in enumerate(examples):
        padded_ids[i, : len(prompt) + len(completion)] = torch.tensor(prompt + completion)
        padded_mask[i, : len(prompt) + len(completion)] = 1
    packed = pack_examples(examples, capacity=capacity, pad_token_id=0)
    block_mask = block_causal_mask(packed.sequence_ids, dtype=torch.float32)

    def step(**inputs) -> None:
        model.zero_grad(set_to_none=True)
        logits = model(**inputs).logits[:, :-1]
        F.log_softmax(logits, dim=-1).gather(-1, inputs["input_ids"][:, 1:].unsqueeze(-1)).sum().backward()

    def anchor() -> None:
        step(input_ids=padded_ids, attention_mask=padded_mask)

    def ours() -> None:
        step(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=block_mask)

    real = sum(len(p) + len(c) for p, c in examples)
    padded_slots, packed_slots = padded_ids.numel(), packed.input_ids.numel()
    anchor_s, ours_s = median_seconds(anchor, repeats), median_seconds(ours, repeats)
    print(f"tiny Qwen2 fwd+bwd over {num_sequences} sequences, {real} real tokens (longest {longest})")
    print(
        f"  anchor (right-padded, {num_sequences}x{longest})   {padded_slots:6d} slots, "
        f"{1 - real / padded_slots:5.1%} padding, {anchor_s * 1e3:8.1f} ms"
    )
    print(
        f"  swarmrl FFD packed ({packed.input_ids.shape[0]}x{capacity})     {packed_slots:6d} slots, "
        f"{1 - real / packed_slots:5.1%} padding, {ours_s * 1e3:8.1f} ms   "
        f"speed-up anchor/swarmrl {anchor_s / ours_s:.2f}x"
    )


class _LargestTensor(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple | list) else [out]:
            if isinstance(tensor, torch.Tensor):
                self.bytes = max(self.bytes, tensor.numel() * tensor.element_size())
        return out


def bench_head(tokens: int, hidden: int, vocab: int, chunk_tokens: int, repeats: int) -> None:
    generator = torch.Generator().manual_seed(2)
    head = torch.nn.Linear(hidden, vocab, bias=False)
    states = torch.randn(tokens, hidden, generator=generator).requires_grad_(True)
    targets = torch.randint(0, vocab, (tokens,), generator=generator)

    def anchor() -> None:
        log_probs = F.log_softmax(head(states).float(), dim=-1)
        chosen = log_probs.gather(-1, targets[:, None]).squeeze(-1)
        (chosen - (log_probs.exp() * log_probs).sum(-1)).sum().backward()

    def ours() -> None:
        scores = token_logprobs(states, head, targets, with_entropy=True, chunk_tokens=chunk_tokens)
        (scores.logprobs + scores.entropy).sum().backward()

    largest = []
    for fn in (anchor, ours):
        with _LargestTensor() as probe:
            fn()
        largest.append(probe.bytes)
    anchor_s, ours_s = median_seconds(anchor, repeats), median_seconds(ours, repeats)
    print(f"LM head logprobs + entropy fwd+bwd, {tokens} tokens x vocab {vocab} (hidden {hidden})")
    print(
        f"  anchor (full fp32 log-softmax)      largest tensor {largest[0] / 2**20:7.1f} MiB, {anchor_s * 1e3:8.1f} ms"
    )
    print(
        f"  swarmrl chunks of {chunk_tokens:<5d}            largest tensor {largest[1] / 2**20:7.1f} MiB, "
        f"{ours_s * 1e3:8.1f} ms   time swarmrl/anchor {ours_s / anchor_s:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bench_loss(rows=64, width=2048, repeats=args.repeats)
    bench_packing(num_sequences=64, repeats=args.repeats)
    bench_head(tokens=2048, hidden=256, vocab=32768, chunk_tokens=256, repeats=args.repeats)


if __name__ == "__main__":
    main()
