"""train_step (packed rows, per-document attention, chunked logprobs, gradient accumulation) against the
padded, full-vocabulary step the trainer ran before, written out by hand."""

from __future__ import annotations

import copy

import pytest
import torch
from trainer_testkit import padded_batch, plain_logprobs, random_examples, scored_rows, tiny_model

from swarmrl.configs import RunConfig
from swarmrl.rollouts import ScoredRow
from swarmrl.trainer.batch import plan_step
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.policy import PackedPolicy
from swarmrl.trainer.train import train_step

torch.set_num_threads(1)

LOSSES = {
    "grpo_two_sided+constant": {},
    "tis+entropy+token": {"normalisation": "token", "correction": {"kind": "tis"}, "entropy_coef": 0.01},
    "gspo+sequence+mis": {
        "normalisation": "sequence",
        "objective": {"kind": "gspo"},
        "correction": {"kind": "mis"},
    },
    "cispo+kl+token": {"normalisation": "token", "objective": {"kind": "cispo"}, "kl_coef": 0.05},
}


def sgd(model: torch.nn.Module, lr: float = 1.0):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)


def rows_of(count: int = 8) -> list[ScoredRow]:
    advantages = torch.randn(count, generator=torch.Generator().manual_seed(7)).tolist()
    return scored_rows(random_examples(count), advantages)


def reference_step(model, optimizer, scheduler, rows, config: RunConfig, ref_model, minibatches: int):
    """The step as the trainer ran it before: padded rows, plain log-softmax, one pass per minibatch."""
    examples = [(r.prompt_ids, r.completion_ids) for r in rows]
    input_ids, attention, completion = padded_batch(examples)
    engine = torch.zeros(completion.shape)
    for i, r in enumerate(rows):
        engine[i, completion[i]] = torch.tensor(r.logprobs)
    advantages = torch.tensor([r.advantage for r in rows])
    temperature = rows[0].temperature
    loss_cfg = config.loss
    model.eval()
    with torch.no_grad():
        old = plain_logprobs(model, input_ids, attention, temperature)[0] if minibatches > 1 else None
        ref = plain_logprobs(ref_model, input_ids, attention, temperature)[0] if ref_model else None
    model.train()
    for index in torch.arange(len(rows)).chunk(minibatches):
        logprobs, entropy = plain_logprobs(model, input_ids[index], attention[index], temperature)
        out = policy_loss(
            logprobs,
            logprobs.detach() if old is None else old[index],
            advantages[index],
            completion[index],
            config=loss_cfg,
            engine_logprobs=engine[index],
            ref_logprobs=ref[index] if ref is not None else None,
            entropy=entropy if loss_cfg.entropy_coef > 0 else None,
        )
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.trainer.max_grad_norm)
        optimizer.step()
        scheduler.step()
    return out


@pytest.mark.parametrize("minibatches", [1, 2])
@pytest.mark.parametrize("loss", list(LOSSES))
def test_packed_step_matches_the_padded_full_vocabulary_step(minibatches: int, loss: str) -> None:
    config = RunConfig.model_validate(
        {
            "trainer": {"optimizer_steps_per_policy_step": minibatches, "micro_batch_tokens": 16},
            "loss": LOSSES[loss],
        }
    )
    rows = rows_of()
    model, reference = tiny_model(), tiny_model()
    ref_model = tiny_model(seed=1) if config.loss.kl_coef > 0 else None
    before = copy.deepcopy(reference.state_dict())
    policy = PackedPolicy(model, attention="sdpa", chunk_tokens=5)
    ref_policy = PackedPolicy(copy.deepcopy(ref_model), attention="sdpa") if ref_model else None
    # SGD: the update is linear in the gradient. (Adam's first step is ≈ lr·sign(g), which turns fp32
    # rounding of near-zero gradients into whole-lr differences.)
    optimizer, scheduler = sgd(model)
    ref_optimizer, ref_scheduler = sgd(reference)

    step = plan_step(rows, pad_token_id=0, minibatches=minibatches, micro_batch_tokens=16)
    assert all(len(mb.micro_batches) > 1 for mb in step.minibatches)  # accumulation is exercised
    metrics = train_step(policy, optimizer, scheduler, step, config, ref_policy, device=torch.device("cpu"))
    expected = reference_step(reference, ref_optimizer, ref_scheduler, rows, config, ref_model, minibatches)

    assert metrics["packed_rows"] == step.packed_rows
    if minibatches == 1:
        assert metrics["loss"] == pytest.approx(float(expected.loss.detach()), rel=1e-5, abs=1e-7)
    changed = False
    for name, param in model.state_dict().items():
        torch.testing.assert_close(
            param, reference.state_dict()[name], rtol=1e-6, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}"
        )
        changed |= not torch.equal(param, before[name])
    assert changed


def sgd_update(rows, config: RunConfig, micro_batch_tokens: int, pack_length: int | None = None):
    """Parameter change of one plain SGD step (lr 1, no clipping): minus the accumulated gradient."""
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer, scheduler = sgd(model)
    step = plan_step(
        rows, pad_token_id=0, minibatches=1, micro_batch_tokens=micro_batch_tokens, pack_length=pack_length
    )
    metrics = train_step(
        PackedPolicy(model, attention="sdpa"), optimizer, scheduler, step, config, device=torch.device("cpu")
    )
    delta = {k: before[k] - v for k, v in model.state_dict().items()}
    return delta, metrics, len(step.minibatches[0].micro_batches)


@pytest.mark.parametrize("normalisation", ["token", "sequence", "constant"])
def test_the_update_does_not_depend_on_the_micro_batch_split(normalisation: str) -> None:
    config = RunConfig.model_validate(
        {"trainer": {"max_grad_norm": 1e9}, "loss": {"normalisation": normalisation}}
    )
    rows = rows_of(12)
    whole, whole_metrics, one = sgd_update(rows, config, micro_batch_tokens=1024, pack_length=128)
    split, split_metrics, many = sgd_update(rows, config, micro_batch_tokens=12, pack_length=12)
    assert one == 1 and many > 4
    for name in whole:
        torch.testing.assert_close(
            split[name], whole[name], rtol=1e-5, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}"
        )
    for key in ("loss", "policy_loss", "clip_low_fraction", "ratio_mean", "approx_kl"):
        assert split_metrics[key] == pytest.approx(whole_metrics[key], rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("normalisation", ["token", "sequence", "constant"])
def test_ranks_gradients_add_up_to_the_one_process_gradient(normalisation: str) -> None:
    """What FSDP does across ranks (average of each rank's world-size-scaled loss), done in one process."""
    config = RunConfig.model_validate({"loss": {"normalisation": normalisation}})
    rows = rows_of(10)
    temperature = rows[0].temperature

    def gradients(rank: int, world: int) -> dict[str, torch.Tensor]:
        model = tiny_model()
        policy = PackedPolicy(model, attention="sdpa")
        step = plan_step(rows, pad_token_id=0, minibatches=1, micro_batch_tokens=24, rank=rank, world=world)
        minibatch = step.minibatches[0]
        for micro in minibatch.micro_batches:
            logprobs, _ = policy.score(micro, temperature)
            old = logprobs.detach() + 0.1 * micro.loss_mask  # ratios off 1 so clipping takes part
            out = policy_loss(
                logprobs,
                old,
                micro.advantages,
                micro.loss_mask,
                config=config.loss,
                sequence_ids=micro.sequence_ids,
                total_sequences=minibatch.total_sequences,
                total_tokens=minibatch.total_tokens,
            )
            (out.loss * world).backward()
        return {name: p.grad / world for name, p in model.named_parameters()}

    one = gradients(0, 1)
    ranks = [gradients(r, 3) for r in range(3)]
    for name in one:
        torch.testing.assert_close(
            sum(g[name] for g in ranks), one[name], rtol=1e-5, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}"
        )
