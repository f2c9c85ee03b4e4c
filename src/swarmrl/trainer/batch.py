"""Turn scored rollout rows into padded training tensors, and per-token logprobs of a model on them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from swarmrl.rollouts import ScoredRow


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, S] prompt ‖ completion, right-padded
    attention_mask: torch.Tensor  # [B, S]
    completion_mask: torch.Tensor  # [B, S-1] 1 where target token S+1 is a completion token
    advantages: torch.Tensor  # [B]
    engine_logprobs: torch.Tensor  # [B, S-1] logprobs the inference engine reported (0 off-mask)
    temperature: float

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device) -> TrainBatch:
        return TrainBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.completion_mask.to(device),
            self.advantages.to(device),
            self.engine_logprobs.to(device),
            self.temperature,
        )

    def select(self, index: torch.Tensor | slice) -> TrainBatch:
        return TrainBatch(
            self.input_ids[index],
            self.attention_mask[index],
            self.completion_mask[index],
            self.advantages[index],
            self.engine_logprobs[index],
            self.temperature,
        )


def collate(rows: list[ScoredRow], pad_token_id: int) -> TrainBatch:
    """Right-pad prompt ‖ completion; position t of the masks scores the token at t + 1."""
    temperatures = {round(row.temperature, 6) for row in rows}
    if len(temperatures) != 1:
        raise ValueError(f"a training batch mixes sampling temperatures {sorted(temperatures)}")
    width = max(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    completion_mask = torch.zeros((len(rows), width - 1), dtype=torch.float32)
    engine_logprobs = torch.zeros((len(rows), width - 1), dtype=torch.float32)
    for i, row in enumerate(rows):
        p, c = len(row.prompt_ids), len(row.completion_ids)
        input_ids[i, : p + c] = torch.tensor(row.prompt_ids + row.completion_ids)
        attention_mask[i, : p + c] = 1
        completion_mask[i, p - 1 : p + c - 1] = 1.0
        engine_logprobs[i, p - 1 : p + c - 1] = torch.tensor(row.logprobs)
    advantages = torch.tensor([row.advantage for row in rows], dtype=torch.float32)
    return TrainBatch(
        input_ids, attention_mask, completion_mask, advantages, engine_logprobs, temperatures.pop()
    )


def token_logprobs(
    model: torch.nn.Module, batch: TrainBatch, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(token_{t+1} | ≤ t) on logits divided by the sampling temperature, [B, S-1]."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    logits = logits / batch.temperature
    log_probs = F.log_softmax(logits, dim=-1)
    targets = batch.input_ids[:, 1:].unsqueeze(-1)
    chosen = log_probs.gather(-1, targets).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1) if with_entropy else None
    return chosen, entropy
