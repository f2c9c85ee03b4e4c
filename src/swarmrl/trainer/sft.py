"""Supervised warm start on task demonstrations, so RL starts from a policy with a non-zero pass rate."""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Sequence

import torch

from swarmrl.models.logprobs import DEFAULT_CHUNK_TOKENS, split_lm, token_logprobs
from swarmrl.models.optim import build_optimizer
from swarmrl.models.prompting import PromptFormat

log = logging.getLogger(__name__)


# (prompt ids, completion ids) or (prompt ids, completion ids, completion mask): a multi-turn demonstration's
# mask is 0 at the environment's tokens, which are context like the prompt and never trained on.
Example = tuple[list[int], list[int]] | tuple[list[int], list[int], list[int]]


def sft_batch(
    examples: Sequence[Example], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, attention mask and labels that score only the (masked-in) completion tokens."""
    width = max(len(e[0]) + len(e[1]) for e in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (prompt, completion, *completion_mask) in enumerate(examples):
        ids = prompt + completion
        input_ids[i, : len(ids)] = torch.tensor(ids)
        targets = torch.tensor(completion)
        if completion_mask:
            if len(completion_mask[0]) != len(completion):
                raise ValueError(
                    f"example {i}: {len(completion_mask[0])} mask bits for {len(completion)} tokens"
                )
            targets[torch.tensor(completion_mask[0]) == 0] = -100
        labels[i, len(prompt) : len(ids)] = targets
        mask[i, : len(ids)] = 1
    return input_ids, mask, labels


def sft_loss(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> torch.Tensor:
    """Mean negative log-likelihood of the labelled tokens (transformers' `labels` loss), with the head and
    log-softmax chunked so the [tokens, vocab] logits never exist."""
    backbone, head = split_lm(model)
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    targets = labels[:, 1:]
    scored = targets != -100
    logprobs = token_logprobs(
        hidden[:, :-1][scored], head, targets[scored], chunk_tokens=chunk_tokens
    ).logprobs
    return -logprobs.mean()


def run_sft(
    model: torch.nn.Module,
    prompts: PromptFormat,
    demonstrations: Sequence[tuple[str, str]] | Sequence[Example],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    seed: int,
    progress=None,
    device: torch.device | None = None,
) -> list[float]:
    """Train on (task prompt, demonstration text) pairs, prompted as in RL, or on token examples already built
    (`Example`, e.g. multi-turn ones); returns the loss of every step.

    Runs on the GPU when there is one (bf16 autocast over fp32 master weights), and hands the model back on
    the CPU, where it was.
    """
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    examples = [
        (prompts.ids(item[0]), prompts.completion_ids(item[1])) if isinstance(item[0], str) else item
        for item in demonstrations
    ]
    if not examples:
        raise ValueError("SFT needs at least one demonstration")
    model.to(device).train()
    optimizer, scheduler = build_optimizer(model, lr, weight_decay, (0.9, 0.95), warmup_steps)
    rng = random.Random(seed)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    )
    losses = []
    for step in range(steps):
        batch = sft_batch(
            rng.sample(examples, min(batch_size, len(examples))), prompts.tokenizer.pad_token_id
        )
        with autocast:
            input_ids, attention_mask, labels = (t.to(device) for t in batch)
            loss = sft_loss(model, input_ids, attention_mask, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress(step + 1, losses[-1])
    model.to("cpu").eval()
    return losses
