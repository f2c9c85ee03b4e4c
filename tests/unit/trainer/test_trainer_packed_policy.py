"""PackedPolicy on a tiny Qwen2: packing changes no sample's logprobs or gradient under any attention
backend; bf16 mixed precision stays close to fp32; activation checkpointing recomputes and changes nothing."""

from __future__ import annotations

import pytest
import torch
from trainer_testkit import grouped_examples, plain_logprobs, random_examples, scored_rows, tiny_model

from swarmrl.trainer.attention import AttentionError, resolve_attention
from swarmrl.trainer.batch import MicroBatch, plan_step
from swarmrl.trainer.policy import PackedPolicy

torch.set_num_threads(1)
TEMPERATURE = 0.7


def one_micro_batch(count: int = 7, pack_length: int = 24, group: int = 1) -> tuple[MicroBatch, list]:
    """`count` random samples, or with `group` > 1 that many completions of each of `count` prompts (laid out
    with each group's prompt shared)."""
    examples = random_examples(count, seed=3) if group == 1 else grouped_examples(count, group, seed=3)
    rows = scored_rows(examples, advantages=[0.0] * len(examples), temperature=TEMPERATURE)
    step = plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=4096, pack_length=pack_length)
    (micro,) = step.minibatches[0].micro_batches
    assert micro.input_ids.shape[0] < len(rows)  # several documents share rows
    if group > 1:
        assert (micro.branch_ids == -1).logical_and(micro.document_ids >= 0).any()  # shared prefixes
    return micro, rows


def per_sequence(micro: MicroBatch, values: torch.Tensor, row: int) -> torch.Tensor:
    """The completion-token values of the step's row `row`, in order."""
    return values[micro.loss_mask & (micro.sequence_ids == micro.row_indices.index(row))]


def alone(model, row) -> torch.Tensor:
    """The sample in a batch of its own, through transformers' own forward: its completion logprobs."""
    ids = torch.tensor([row.prompt_ids + row.completion_ids])
    logprobs, _ = plain_logprobs(model, ids, torch.ones_like(ids), TEMPERATURE)
    return logprobs[0, len(row.prompt_ids) - 1 :]


@pytest.mark.parametrize("group", [1, 4], ids=["distinct prompts", "groups share their prompt"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packing_changes_no_logprob_and_no_gradient(attention: str, group: int) -> None:
    micro, rows = one_micro_batch(
        count=7 if group == 1 else 3, pack_length=24 if group == 1 else 48, group=group
    )
    weights = torch.randn(len(rows), generator=torch.Generator().manual_seed(5))
    packed_model, reference = tiny_model(), tiny_model()

    logprobs, _ = PackedPolicy(packed_model, attention=attention, chunk_tokens=4).score(micro, TEMPERATURE)
    packed_loss = sum(weights[i] * per_sequence(micro, logprobs, i).sum() for i in range(len(rows)))
    packed_loss.backward()

    reference_loss = 0.0
    for i, row in enumerate(rows):
        expected = alone(reference, row)
        torch.testing.assert_close(per_sequence(micro, logprobs, i), expected.detach(), rtol=1e-5, atol=1e-6)
        reference_loss = reference_loss + weights[i] * expected.sum()
    reference_loss.backward()
    for (name, got), expected in zip(packed_model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(
            got.grad, expected.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize("group", [1, 4], ids=["distinct prompts", "groups share their prompt"])
def test_flex_block_mask_isolates_documents(group: int) -> None:
    # PyTorch has no FlexAttention backward on CPU: forward values here, training on CUDA.
    micro, rows = one_micro_batch(
        count=7 if group == 1 else 3, pack_length=40 if group == 1 else 48, group=group
    )
    model = tiny_model()
    with torch.no_grad():
        logprobs, _ = PackedPolicy(model, attention="flex").score(micro, TEMPERATURE)
        reference = tiny_model()
        for i, row in enumerate(rows):
            torch.testing.assert_close(
                per_sequence(micro, logprobs, i), alone(reference, row), rtol=1e-5, atol=1e-6
            )


def test_attention_choice_per_device() -> None:
    assert resolve_attention("auto", torch.device("cpu")) == "sdpa"
    assert resolve_attention("auto", torch.device("cuda")) == "flex"
    assert resolve_attention("eager", torch.device("cpu")) == "eager"
    with pytest.raises(AttentionError, match="CUDA only"):
        resolve_attention("flex", torch.device("cpu"))


def gradients(policy: PackedPolicy, micro: MicroBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    logprobs, entropy = policy.score(micro, TEMPERATURE, with_entropy=True)
    loss = -(logprobs * micro.advantages).sum() / micro.loss_mask.sum() - 0.01 * entropy.sum()
    loss.backward()
    return logprobs.detach(), {n: p.grad.clone() for n, p in policy.model.named_parameters()}


def test_bf16_mixed_precision_keeps_fp32_master_state_and_stays_close_to_fp32() -> None:
    micro, _ = one_micro_batch()
    micro = MicroBatch(**{**micro.__dict__, "advantages": torch.where(micro.loss_mask, 1.0, 0.0)})
    full_logprobs, full = gradients(PackedPolicy(tiny_model()), micro)
    model = tiny_model()
    mixed_logprobs, mixed = gradients(PackedPolicy(model, autocast_dtype=torch.bfloat16), micro)

    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    optimizer.step()
    assert all(s["exp_avg"].dtype == torch.float32 for s in optimizer.state.values())

    assert not torch.equal(mixed_logprobs, full_logprobs)  # bf16 did run
    torch.testing.assert_close(mixed_logprobs, full_logprobs, rtol=0, atol=0.05)
    flat_full = torch.cat([g.flatten() for g in full.values()])
    flat_mixed = torch.cat([g.flatten() for g in mixed.values()])
    relative = (flat_mixed - flat_full).norm() / flat_full.norm()
    assert relative < 0.05, relative


def test_activation_checkpointing_recomputes_blocks_and_gives_the_same_gradients() -> None:
    micro, _ = one_micro_batch()
    micro = MicroBatch(**{**micro.__dict__, "advantages": torch.where(micro.loss_mask, 1.0, 0.0)})
    _, plain = gradients(PackedPolicy(tiny_model()).train(), micro)

    model = tiny_model()
    calls = []
    # a pre-hook: non-reentrant recomputation stops as soon as the saved tensors are back, before a
    # post-forward hook of the last submodule would run
    model.model.layers[0].mlp.register_forward_pre_hook(lambda *_: calls.append(1))
    _, checkpointed = gradients(PackedPolicy(model, activation_checkpointing=True).train(), micro)
    assert len(calls) == 2  # forward, and again in backward
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=0, atol=0, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention trains on CUDA only")
def test_flex_training_on_cuda_matches_sdpa_packed_and_alone() -> None:
    """On a GPU: the flex path's logprobs and gradients equal the dense-mask path's (fp32)."""
    micro, _ = one_micro_batch(pack_length=40)
    micro = micro.to(torch.device("cuda"))
    weights = torch.where(micro.loss_mask, 1.0, 0.0)
    results = []
    for attention in ("flex", "sdpa"):
        model = tiny_model().cuda()
        logprobs, _ = PackedPolicy(model, attention=attention).score(micro, TEMPERATURE)
        (logprobs * weights).sum().backward()
        results.append((logprobs.detach(), [p.grad for p in model.parameters()]))
    (flex, flex_grads), (sdpa, sdpa_grads) = results
    torch.testing.assert_close(flex, sdpa, rtol=1e-4, atol=1e-5)
    for got, expected in zip(flex_grads, sdpa_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-5)
