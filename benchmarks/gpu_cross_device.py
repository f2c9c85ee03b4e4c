"""Honest drift between a GPU worker and a validator; generation and train-step speed: CPU vs CUDA side by side.

A worker generates with the seeded sampler on one device and commits TOPLOC proofs; a validator recomputes the
prefill on the same or another device. Printed per (worker device → validator device): TOPLOC pass rate and
worst chunk statistics, the largest logprob gap and the smallest seeded-replay margin (the quantities that
`swarmrl validator calibrate` sets tolerances from), generation tokens/s per device, and the trainer's policy
step (GRPO loss, AdamW, two minibatches) on each device, its checkpoint written from the GPU and reloaded on CPU.

    python benchmarks/gpu_cross_device.py --policy DIR --prompts prompts.json [--completions 512]

Needs a CUDA device (run through the device tool); `prompts.json` is a list of prompt token-id lists.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

import torch

from swarmrl.configs import RunConfig
from swarmrl.configs.validator import ValidatorConfig
from swarmrl.inference.engine import GenerationRequest, SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.optim import build_optimizer
from swarmrl.rollouts import ScoredRow
from swarmrl.steps import checkpoint_dir
from swarmrl.trainer.checkpoint import save_checkpoint
from swarmrl.trainer.train import build_policy, plan_policy_step, train_step
from swarmrl.validator.calibrate import commit, measure


def generate(model, requests, params, batch: int, eos: int):
    engine = TorchEngine(model, eos_token_id=eos)
    engine.generate(requests[:batch], params)  # warm-up (kernels, allocator)
    if next(model.parameters()).is_cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    out = [
        g for i in range(0, len(requests), batch) for g in engine.generate(requests[i : i + batch], params)
    ]
    if next(model.parameters()).is_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return out, sum(len(g.completion_ids) for g in out) / seconds


def judge(model, generations, proofs, params) -> dict[str, float]:
    """The validator's compute on every completion (prefill, TOPLOC, logprobs, seeded replay), timed."""
    cuda = next(model.parameters()).is_cuda
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    measured = measure("", model, generations, proofs, params, ValidatorConfig(prefill_batch_size=32))
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    gaps = sorted(m.logprob_gap for m in measured)
    return {
        "toploc_pass": sum(m.toploc_ok for m in measured) / len(measured),
        "worst_exponent_match": min(m.exponent_match for m in measured),
        "worst_mantissa_mean": max(m.mantissa_mean for m in measured),
        "max_logprob_gap": gaps[-1],
        "p99_logprob_gap": gaps[int(0.99 * (len(gaps) - 1))],
        "min_choice_margin": min(m.choice_margin for m in measured),
        "replay_flipped_completions": sum(m.choice_margin < 0 for m in measured),
        "validated_tokens_per_s": sum(len(g.completion_ids) for g in generations) / seconds,
    }


def train_rows(generations) -> list[ScoredRow]:
    rows = []
    for i, g in enumerate(generations):
        advantage = 1.0 if i % 2 else -1.0
        rows.append(
            ScoredRow(
                g.prompt_ids,
                g.completion_ids,
                0,
                f"t{i // 8}",
                i // 8,
                i // 8,
                g.seed,
                1.0,
                -1,
                g.logprobs,
                g.finish_reason,
                reward=advantage,
                advantage=advantage,
            )
        )
    return rows


def time_train_step(path: str, rows: list[ScoredRow], pad_id: int, device: str) -> tuple[float, dict]:
    config = RunConfig()
    model = load_model(path)
    policy = build_policy(model, config.trainer, torch.device(device)).train()
    optimizer, scheduler = build_optimizer(model, 1e-4, 0.0, (0.9, 0.99), 0)
    batch = plan_policy_step(rows, config.trainer, policy, pad_id)
    train_step(policy, optimizer, scheduler, batch, config, device=torch.device(device))  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    metrics = train_step(policy, optimizer, scheduler, batch, config, device=torch.device(device))
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(Path(tmp), 1, model, load_tokenizer(path), keep=2)
        reloaded = load_model(checkpoint_dir(Path(tmp), 1))
        trained = model.state_dict()
        same = all(torch.equal(trained[k].detach().cpu(), v) for k, v in reloaded.state_dict().items())
    return seconds, {"loss": metrics["loss"], "grad_norm": metrics["grad_norm"], "checkpoint_roundtrip": same}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--completions", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="re-initialise the policy (long completions: it rarely picks EOS) with room for the new tokens",
    )
    args = parser.parse_args()
    assert torch.cuda.is_available(), "this benchmark compares CUDA with CPU"
    tokenizer = load_tokenizer(args.policy)
    eos = tokenizer.eos_token_id
    prompts = json.load(open(args.prompts))
    requests = [GenerationRequest(prompts[i % len(prompts)], 77_000 + i) for i in range(args.completions)]
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0)
    policy = load_model(args.policy)
    if args.random_weights:
        config = copy.deepcopy(policy.config)
        config.max_position_embeddings = max(config.max_position_embeddings, 64 + args.max_new_tokens)
        torch.manual_seed(0)
        policy = type(policy)(config)
    models = {"cpu": policy.eval(), "cuda": copy.deepcopy(policy).eval().to("cuda")}
    print(
        f"torch {torch.__version__} · {torch.cuda.get_device_name()} · tf32 matmul {torch.backends.cuda.matmul.allow_tf32}"
    )
    generated, generation_rates, proofs = {}, {}, {}
    for device, model in models.items():
        generated[device], rate = generate(model, requests, params, args.batch, eos)
        generation_rates[device] = rate
        proofs[device] = commit(generated[device])
        print(f"generation on {device:4s}: {rate:10.0f} tokens/s (batch {args.batch})")
    rates = {}
    for worker in ("cpu", "cuda"):
        for validator in ("cpu", "cuda"):
            stats = judge(models[validator], generated[worker], proofs[worker], params)
            rates[worker, validator] = stats["validated_tokens_per_s"]
            cells = " ".join(f"{k}={v:.3g}" for k, v in stats.items())
            print(f"worker {worker:4s} → validator {validator:4s}: {cells}")
    for device in ("cpu", "cuda"):
        ratio = rates[device, device] / generation_rates[device]
        print(f"validated/generated tokens per second on {device}: {ratio:.2f}x")
    if args.random_weights:
        return
    rows = train_rows(generated["cuda"][:256])
    timings = {}
    for device in ("cpu", "cuda"):
        timings[device], info = time_train_step(args.policy, rows, tokenizer.pad_token_id, device)
        print(f"train step on {device:4s} ({len(rows)} rows): {timings[device] * 1000:8.1f} ms  {info}")
    print(f"train step speed-up cuda/cpu: {timings['cpu'] / timings['cuda']:.1f}x")


if __name__ == "__main__":
    main()
