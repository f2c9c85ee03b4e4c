"""The trainer at real shape on one GPU: tokens/s and MFU of `train_step` for the Qwen3-0.6B and Qwen3-1.7B
shapes on 16k-token packed micro-batches, and peak memory of the chunked LM head vs the plain path.

Per shape (random init: shapes, not weights, decide speed and memory):

1. Throughput: `train_step` as the trainer runs it — fp32 master weights and AdamW state, bf16 autocast,
   FlexAttention over 16,384-token packed rows with per-document block masks, the LM head + log-softmax in
   1,024-token chunks, one optimizer step over several micro-batches (gradient accumulation). Rows: RL-like
   prompt 64–256 + completion 256–1,024 tokens. Prints real tokens/s and MFU. Model FLOPs per step:
   6 × (block matmul parameters) × tokens + 6 × V × H × scored tokens (the head runs on completion tokens
   only) + causal attention 12 × heads × head_dim × Σ L(L+1)/2 per layer over each document; activation
   recomputation is not counted. MFU is given against the H100 SXM's 989 TFLOP/s dense bf16 and against an
   8192³ bf16 matmul measured in the same run.
2. Memory: one micro-batch forward + backward with the chunked head, then with the plain path (full
   [16k, 152k] logits → float → log_softmax → gather, what the trainer did before), peak allocated each;
   also with activation checkpointing on.

Run it on a lent H100 with `bash benchmarks/run_gpu.sh 3` (it installs the few pure-Python wheels the GPU
image lacks); results go to --out as JSON and to stdout.

    python benchmarks/bench_trainer_gpu.py --out $OUT/trainer_gpu.json [--shapes qwen3-0.6b qwen3-1.7b]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch
from transformers import PretrainedConfig

from swarmrl.configs import RunConfig
from swarmrl.models.optim import build_optimizer
from swarmrl.models.shapes import build_shaped_model, shape_config
from swarmrl.rollouts import ScoredRow
from swarmrl.trainer.attention import document_mask
from swarmrl.trainer.batch import MicroBatch, plan_step
from swarmrl.trainer.policy import PackedPolicy
from swarmrl.trainer.train import build_policy, plan_policy_step, train_step

SHAPES = ("qwen3-0.6b", "qwen3-1.7b")  # shipped in swarmrl/models/shapes/ (published config.json fields)
# A few-layer cut of the 0.6B shape for `--smoke`: checks on a CPU that the script runs end to end (no figures).
SMOKE_OVERRIDES = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=512,
    bos_token_id=1,
    eos_token_id=2,
)
H100_BF16_DENSE = 989.4e12
GIB = 1024**3


def synthetic_rows(
    total_tokens: int, vocab: int, seed: int = 0, prompt=(64, 256), completion=(256, 1024)
) -> list[ScoredRow]:
    rng = random.Random(seed)
    rows, tokens = [], 0
    while tokens < total_tokens:
        prompt_ids = [rng.randrange(3, vocab) for _ in range(rng.randint(*prompt))]
        completion_ids = [rng.randrange(3, vocab) for _ in range(rng.randint(*completion))]
        rows.append(
            ScoredRow(
                prompt_ids=prompt_ids,
                completion_ids=completion_ids,
                policy_step=0,
                task_id="bench",
                prompt_index=len(rows),
                group_id=len(rows) // 16,
                sample_seed=len(rows),
                temperature=1.0,
                target_length=-1,
                logprobs=[-1.0] * len(completion_ids),
                finish_reason="length",
                advantage=rng.choice([-1.0, 1.0]) * rng.random(),
            )
        )
        tokens += len(prompt_ids) + len(completion_ids)
    return rows


def model_flops(shape: PretrainedConfig, rows: list[ScoredRow]) -> float:
    head_dim = getattr(shape, "head_dim", None) or shape.hidden_size // shape.num_attention_heads
    attention_width = shape.num_attention_heads * head_dim
    block = (
        shape.hidden_size * attention_width * 2  # q, o
        + shape.hidden_size * shape.num_key_value_heads * head_dim * 2  # k, v
        + 3 * shape.hidden_size * shape.intermediate_size  # gate, up, down
    )
    tokens = sum(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    scored = sum(len(r.completion_ids) for r in rows)
    pairs = sum((n := len(r.prompt_ids) + len(r.completion_ids)) * (n + 1) // 2 for r in rows)
    return (
        6 * shape.num_hidden_layers * block * tokens
        + 6 * shape.vocab_size * shape.hidden_size * scored
        + 12 * shape.num_hidden_layers * attention_width * pairs
    )


def matmul_peak() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 10 * 2 * 8192**3 / (time.perf_counter() - start)


def run_config(micro_batch_tokens: int, activation_checkpointing: bool = False) -> RunConfig:
    return RunConfig.model_validate(
        {
            "trainer": {
                "precision": "bf16",
                "attention": "auto",  # flex on CUDA
                "micro_batch_tokens": micro_batch_tokens,
                "pack_length": micro_batch_tokens,
                "optimizer_steps_per_policy_step": 1,
                "logprob_chunk_tokens": 1024,
                "activation_checkpointing": activation_checkpointing,
                "lr": 1e-6,
            }
        }
    )


def build(
    name: str, overrides: dict, config: RunConfig, device: torch.device
) -> tuple[PackedPolicy, torch.nn.Module]:
    # fp32 master weights, built on the CPU as the trainer loads them; build_policy moves them to `device`.
    model = build_shaped_model(name, dtype=torch.float32, **overrides)
    return build_policy(model, config.trainer, device).train(), model


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def throughput(
    name: str,
    overrides: dict,
    rows: list[ScoredRow],
    micro_batch_tokens: int,
    steps: int,
    device: torch.device,
) -> dict:
    config = run_config(micro_batch_tokens)
    policy, model = build(name, overrides, config, device)
    optimizer, scheduler = build_optimizer(model, 1e-6, 0.01, (0.9, 0.99), 0)
    step = plan_policy_step(rows, config.trainer, policy, pad_token_id=0)
    train_step(policy, optimizer, scheduler, step, config, device=device)  # compile flex, warm the allocator
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        metrics = train_step(policy, optimizer, scheduler, step, config, device=device)
    sync(device)
    seconds = (time.perf_counter() - start) / steps
    tokens = sum(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    flops = model_flops(model.config, rows)
    result = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "rows": len(rows),
        "micro_batches": len(step.minibatches[0].micro_batches),
        "padding_fraction": step.padding_fraction,
        "tokens_per_step": tokens,
        "seconds_per_step": seconds,
        "tokens_per_second": tokens / seconds,
        "model_tflops_per_second": flops / seconds / 1e12,
        "mfu_vs_989_tflops": flops / seconds / H100_BF16_DENSE,
        "train_step_peak_gib": torch.cuda.max_memory_allocated() / GIB if device.type == "cuda" else None,
        "loss": metrics["loss"],
    }
    del policy, model, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def plain_logprobs(policy: PackedPolicy, micro: MicroBatch) -> torch.Tensor:
    """The trainer's path before chunking: logits of every position, float32 log-softmax, gather."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = policy.model(
            input_ids=micro.input_ids,
            position_ids=micro.position_ids,
            attention_mask=document_mask(micro.document_ids, policy.attention),
            use_cache=False,
        ).logits[:, :-1]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(-1, micro.input_ids[:, 1:, None]).squeeze(-1)


def peak_memory(name: str, micro_batch_tokens: int) -> dict:
    """Peak GiB of one micro-batch forward + backward (weights and gradients included, no optimizer)."""
    rows = synthetic_rows(int(micro_batch_tokens * 0.97), shape_config(name).vocab_size, seed=1)
    micro = (
        plan_step(
            rows,
            pad_token_id=0,
            minibatches=1,
            micro_batch_tokens=micro_batch_tokens,
            pack_length=micro_batch_tokens,
        )
        .minibatches[0]
        .micro_batches[0]
    )
    micro = micro.to(torch.device("cuda"))
    results = {}
    for name, checkpointing, plain in (
        ("chunked", False, False),
        ("plain", False, True),
        ("chunked+activation_checkpointing", True, False),
    ):
        policy, model = build(name, {}, run_config(micro_batch_tokens, checkpointing), torch.device("cuda"))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        try:
            logprobs = plain_logprobs(policy, micro) if plain else policy.score(micro, 1.0)[0]
            (logprobs * micro.loss_mask).sum().backward()
            torch.cuda.synchronize()
            results[name] = round(torch.cuda.max_memory_allocated() / GIB, 2)
        except torch.OutOfMemoryError:
            results[name] = "out of memory"
        del policy, model
        torch.cuda.empty_cache()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument("--micro-batches", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--out", default="trainer_gpu.json")
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny shape on the CPU: checks the script runs"
    )
    args = parser.parse_args()
    if args.smoke:  # the same path as a GPU run, on a CPU with a cut-down shape and short rows
        device, overrides, lengths = (
            torch.device("cpu"),
            SMOKE_OVERRIDES,
            {"prompt": (8, 16), "completion": (16, 64)},
        )
        args.shapes, args.micro_batch_tokens, args.micro_batches, args.steps = [SHAPES[0]], 256, 2, 1
    elif torch.cuda.is_available():
        device, overrides, lengths = torch.device("cuda"), {}, {}
    else:
        raise SystemExit("needs a CUDA device (or --smoke)")
    on_gpu = device.type == "cuda"
    report = {
        "device": torch.cuda.get_device_name() if on_gpu else "cpu (smoke run: no figures)",
        "torch": torch.__version__,
        "measured_bf16_matmul_tflops": matmul_peak() / 1e12 if on_gpu else None,
        "micro_batch_tokens": args.micro_batch_tokens,
        "shapes": {},
    }
    print(
        f"{report['device']}, torch {report['torch']}, 8192³ bf16 matmul {report['measured_bf16_matmul_tflops']} TFLOP/s"
    )
    for name in args.shapes:
        # Rows fill the micro-batches to about 97%, as FFD packing of RL-length rows does.
        vocab = shape_config(name, **overrides).vocab_size
        rows = synthetic_rows(int(args.micro_batch_tokens * args.micro_batches * 0.97), vocab, **lengths)
        result = throughput(name, overrides, rows, args.micro_batch_tokens, args.steps, device)
        if on_gpu:
            result["mfu_vs_measured_matmul"] = (
                result["model_tflops_per_second"] / report["measured_bf16_matmul_tflops"]
            )
            result["peak_memory_gib"] = peak_memory(name, args.micro_batch_tokens)
        report["shapes"][name] = result
        print(
            f"{name}: {result['parameters'] / 1e6:.1f}M params, {result['tokens_per_second']:,.0f} tokens/s, "
            f"{result['model_tflops_per_second']:.3g} TFLOP/s, MFU {result['mfu_vs_989_tflops']:.1%} (of 989), "
            f"{result.get('mfu_vs_measured_matmul', 0.0):.1%} (of measured matmul); "
            f"padding {result['padding_fraction']:.1%}; {result['micro_batches']} micro-batches; "
            f"step peak {result['train_step_peak_gib']} GiB"
        )
        print(f"  one micro-batch fwd+bwd peak GiB: {result.get('peak_memory_gib')}")
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
