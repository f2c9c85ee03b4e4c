"""Every GPU figure of the paged engine (issue 12) in one script, part by part, each result saved as it lands.

Parts (in this order unless --parts says otherwise):
  tests           `pytest -m gpu` on the inference and TOPLOC GPU tests (a subprocess), pass/fail counts
  copy_bandwidth  device-to-device copy bandwidth (bytes read + written per second): the HBM roofline's rate
  nano_vllm       nano-vllm's bench workload (256 sequences, prompt and output lengths uniform in 100-1024,
                  random token ids, temperature 0.6, EOS ignored) on the Qwen3-0.6B shape in bf16: swarmrl
                  (seeded sampling, hidden-state capture) vs HF `generate` on the same GPU, tokens/s and ratio
  batch16         16 prompts of 512 tokens, 512 new tokens each: swarmrl vs HF `generate`
  roofline        decode at batch 256 with ~1k context: step time vs (weights + KV bytes) / copy bandwidth
  sharing         GRPO-shaped: 64 prompts × G=16, 512-token prompts, 256 new tokens, shared prefill on vs off
  honesty         512 completions × 1,024 tokens generated on CUDA, proved on the GPU (proof time vs
                  generation time) and judged by the CUDA validator and a CPU validator (as many as its time
                  budget allows): TOPLOC, logprob gaps and seeded-replay margins; false rejects under the
                  default thresholds and under thresholds calibrated on a disjoint quarter of the completions
  memory          Qwen2.5-7B shape: the paged cache's token capacity in the granted memory, a real run at
                  256 rows filling it, vs the rows a cache preallocated to the model's 32,768 positions holds

Results go to OUT/engine_gpu.json (a list, rewritten after every part) and a summary table is printed last.
Each part runs under try/except and its own time budget (HF baselines stop at theirs; the CPU validator
judges what fits in its budget), so one failure or a slow anchor never costs the other figures.

On the lent H100 (torch 2.11 + CUDA there, no network) this needs pydantic's wheels carried along: here,
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu-wheels \\
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
then run, carrying `.gpu-wheels`, in three commands of under 10 minutes each:
  pip install -q --no-index --no-deps --target /tmp/site .gpu-wheels/*.whl && \\
  PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1 python3 benchmarks/engine_gpu_bench.py --out $OUT \\
    --parts tests,copy_bandwidth,nano_vllm,batch16
  ... --parts roofline,sharing,honesty
  ... --parts memory
`--dry-run` runs every part at toy sizes on a cut-down model (on CPU in `make test`).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.configs.validator import ValidatorConfig
from swarmrl.inference import GenerationRequest, PagedEngine, SamplingParams
from swarmrl.inference.engine import Generation
from swarmrl.models.shapes import build_shaped_model, shape_config
from swarmrl.toploc import build_proofs_batch
from swarmrl.validator.calibrate import Measured, measure

PARTS = ("tests", "copy_bandwidth", "nano_vllm", "batch16", "roofline", "sharing", "honesty", "memory")
BUDGETS = {  # seconds per part
    "tests": 240,
    "copy_bandwidth": 30,
    "nano_vllm": 300,
    "batch16": 120,
    "roofline": 120,
    "sharing": 180,
    "honesty": 420,
    "memory": 300,
}
# A cut-down shape for --dry-run: Qwen's vocabulary, everything else tiny.
DRY_SHAPE = dict(
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


@dataclass(frozen=True)
class Sizes:
    """Workload sizes; the defaults are the issue's, --dry-run shrinks them."""

    nano_seqs: int = 256
    nano_min: int = 100
    nano_max: int = 1024
    b16_rows: int = 16
    b16_prompt: int = 512
    b16_new: int = 512
    roof_rows: int = 256
    roof_prompt: int = 960
    roof_new: int = 129
    share_prompts: int = 64
    share_group: int = 16
    share_prompt: int = 512
    share_new: int = 256
    honest_prompts: int = 32
    honest_group: int = 16
    honest_prompt: int = 128
    honest_new: int = 1024
    memory_rows: int = 256
    memory_new: int = 64
    memory_cpu_gib: float = 0.02  # the pool of a CPU run (dry runs); a GPU grants gpu_memory_fraction
    hf_batch: int = 64

    @classmethod
    def dry(cls) -> Sizes:
        return cls(
            nano_seqs=6,
            nano_min=4,
            nano_max=20,
            b16_rows=3,
            b16_prompt=12,
            b16_new=8,
            roof_rows=4,
            roof_prompt=24,
            roof_new=6,
            share_prompts=3,
            share_group=4,
            share_prompt=16,
            share_new=8,
            honest_prompts=4,
            honest_group=2,
            honest_prompt=12,
            # One full TOPLOC chunk (32 tokens) and a partial one: the validator's Gumbel noise, 151936 wide for
            # every token, is most of the dry run's time.
            honest_new=33,
            memory_rows=4,
            memory_new=4,
            memory_cpu_gib=0.002,
            hf_batch=4,
        )


@dataclass
class Bench:
    args: argparse.Namespace
    sizes: Sizes
    device: torch.device
    results: list[dict] = field(default_factory=list)
    copy_bandwidth: float | None = None  # bytes read + written per second
    engine_info: dict = field(default_factory=dict)  # setup time and pool of the shared engine
    _engine: PagedEngine | None = None

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def engine(self) -> PagedEngine:
        """The Qwen3-0.6B-shaped engine every throughput part shares (its kernels compile once)."""
        if self._engine is None:
            model = self.build("qwen3-0.6b")
            config = PagedEngineConfig(
                max_num_seqs=256,
                gpu_memory_fraction=self.args.gpu_memory_fraction,
                cpu_kv_cache_gib=0.05,
            )
            started = time.perf_counter()
            self._engine = PagedEngine(model, config)
            self.engine_info = {
                "engine_setup_s": time.perf_counter() - started,  # pool sizing, compiles, graph capture
                "block_size": self._engine.runner.block_size,
                "kv_blocks": self._engine.runner.pool.num_blocks,
                "buckets": self._engine.runner.buckets,
            }
            warm = [GenerationRequest(random_ids(random.Random(9), 16), seed=i) for i in range(4)]
            self._engine.generate(warm, SamplingParams(max_new_tokens=8, ignore_eos=True))  # sampler compile
        return self._engine

    def drop_engine(self) -> None:
        self._engine = None
        release(self.device)

    def build(self, shape: str) -> torch.nn.Module:
        overrides = DRY_SHAPE if self.args.dry_run else {}
        return build_shaped_model(shape, device=self.device, dtype=torch.bfloat16, **overrides)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def random_ids(rng: random.Random, length: int) -> list[int]:
    """nano-vllm's prompts: token ids uniform in [0, 10000]."""
    return [rng.randint(0, 10_000) for _ in range(length)]


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --- anchors ------------------------------------------------------------------------------------------


def timed_generate(
    bench: Bench, requests: list[GenerationRequest], params: SamplingParams
) -> tuple[dict, list[Generation]]:
    engine = bench.engine()
    bench.sync()
    started = time.perf_counter()
    generations = engine.generate(requests, params)
    bench.sync()
    seconds = time.perf_counter() - started
    tokens = sum(len(g.completion_ids) for g in generations)
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "prefill_s": engine.last_timing.prefill_seconds,
        "decode_s": engine.last_timing.decode_seconds,
        "prefilled_tokens": engine.last_stats.prefilled_tokens,
        "preemptions": engine.last_stats.preemptions,
    }, generations


def hf_generate(
    bench: Bench, prompts: list[list[int]], lengths: list[int], temperature: float, deadline: float
) -> dict:
    """HF `generate` over the workload in batches (left-padded, each batch to its longest output, EOS
    suppressed); useful tokens are each row's own output length. Stops starting batches at the deadline."""
    model = bench.engine().model
    batch = bench.sizes.hf_batch
    tokens, seconds, rows, start = 0, 0.0, 0, 0
    while start < len(prompts):
        if time.monotonic() > deadline and rows:
            break
        chunk, wanted = prompts[start : start + batch], lengths[start : start + batch]
        width = max(len(p) for p in chunk)
        input_ids = torch.zeros((len(chunk), width), dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for row, prompt in enumerate(chunk):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
        new = max(wanted)
        bench.sync()
        started = time.perf_counter()
        try:
            with torch.inference_mode():
                model.generate(
                    input_ids=input_ids.to(bench.device),
                    attention_mask=mask.to(bench.device),
                    do_sample=True,
                    temperature=temperature,
                    top_p=1.0,
                    top_k=0,
                    max_new_tokens=new,
                    min_new_tokens=new,
                    pad_token_id=0,
                )
        except torch.OutOfMemoryError:
            if batch == 1:
                raise
            batch //= 2  # HF's cache did not fit next to the engine's: smaller batches, same workload
            release(bench.device)
            continue
        bench.sync()
        seconds += time.perf_counter() - started
        tokens += sum(wanted)
        rows += len(chunk)
        start += len(chunk)
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "rows": rows,
        "batch": batch,
    }


def versus(swarmrl: dict, hf: dict) -> dict:
    return {"swarmrl": swarmrl, "hf_generate": hf, "ratio": swarmrl["tokens_per_s"] / hf["tokens_per_s"]}


# --- parts --------------------------------------------------------------------------------------------


def part_tests(bench: Bench, deadline: float) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu"]
    command += ["tests/unit/inference", "tests/unit/toploc"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=max(30.0, deadline - time.monotonic())
    )
    tail = (done.stdout + done.stderr).strip().splitlines()[-25:]
    return {"returncode": done.returncode, "summary": tail[-1] if tail else "", "tail": tail}


def part_copy_bandwidth(bench: Bench, deadline: float) -> dict:
    if not bench.cuda:
        bench.copy_bandwidth = 1e10  # a placeholder rate: the dry run only exercises the arithmetic
        return {"bytes_per_s": bench.copy_bandwidth, "note": "no GPU: placeholder"}
    size = (4 << 30) if bench._engine is None else (1 << 30)
    source = torch.empty(size // 2, dtype=torch.bfloat16, device=bench.device).normal_()
    target = torch.empty_like(source)
    times = []
    for _ in range(25):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    del source, target
    release(bench.device)
    seconds = statistics.median(times[5:])
    bench.copy_bandwidth = 2 * size / seconds
    return {"bytes_per_s": bench.copy_bandwidth, "buffer_bytes": size, "median_s": seconds}


def part_nano_vllm(bench: Bench, deadline: float) -> dict:
    s = bench.sizes
    rng = random.Random(0)
    prompts = [random_ids(rng, rng.randint(s.nano_min, s.nano_max)) for _ in range(s.nano_seqs)]
    lengths = [rng.randint(s.nano_min, s.nano_max) for _ in range(s.nano_seqs)]
    requests = [
        GenerationRequest(p, seed=i, max_new_tokens=n)
        for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))
    ]
    params = SamplingParams(max_new_tokens=s.nano_max, temperature=0.6, ignore_eos=True)
    swarmrl, _ = timed_generate(bench, requests, params)
    return versus(swarmrl, hf_generate(bench, prompts, lengths, 0.6, deadline))


def part_batch16(bench: Bench, deadline: float) -> dict:
    s = bench.sizes
    rng = random.Random(1)
    prompts = [random_ids(rng, s.b16_prompt) for _ in range(s.b16_rows)]
    requests = [GenerationRequest(p, seed=i) for i, p in enumerate(prompts)]
    params = SamplingParams(max_new_tokens=s.b16_new, temperature=1.0, ignore_eos=True)
    swarmrl, _ = timed_generate(bench, requests, params)
    return versus(swarmrl, hf_generate(bench, prompts, [s.b16_new] * s.b16_rows, 1.0, deadline))


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes a decoding step reads from the weights: every parameter once (a tied embedding is the LM head;
    an untied input embedding is only gathered by row, so it is left out)."""
    unique = {id(p): p for p in model.parameters()}
    total = sum(p.numel() * p.element_size() for p in unique.values())
    embedding = model.get_input_embeddings().weight
    if embedding is not model.get_output_embeddings().weight:
        total -= embedding.numel() * embedding.element_size()
    return total


def kv_bytes_per_token(config) -> int:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 2  # bf16 keys and values


def part_roofline(bench: Bench, deadline: float) -> dict:
    s = bench.sizes
    if bench.copy_bandwidth is None:
        part_copy_bandwidth(bench, deadline)
    engine = bench.engine()
    rng = random.Random(2)
    requests = [GenerationRequest(random_ids(rng, s.roof_prompt), seed=i) for i in range(s.roof_rows)]
    run, _ = timed_generate(bench, requests, SamplingParams(max_new_tokens=s.roof_new, ignore_eos=True))
    steps = engine.last_stats.decode_steps
    step_s = run["decode_s"] / steps
    # Contexts during decode run from prompt + 1 to prompt + new − 1 tokens.
    mean_context = s.roof_prompt + s.roof_new / 2
    weights = model_bytes(engine.model)
    kv = s.roof_rows * mean_context * kv_bytes_per_token(engine.model.config)
    roofline_s = (weights + kv) / bench.copy_bandwidth
    return {
        "rows": s.roof_rows,
        "mean_context": mean_context,
        "decode_steps": steps,
        "step_s": step_s,
        "decode_tokens_per_s": engine.last_timing.decode_rows / run["decode_s"],
        "weight_bytes": weights,
        "kv_bytes_per_step": kv,
        "copy_bytes_per_s": bench.copy_bandwidth,
        "roofline_step_s": roofline_s,
        "roofline_tokens_per_s": s.roof_rows / roofline_s,
        "fraction_of_roofline": roofline_s / step_s,
        "run": run,
    }


def part_sharing(bench: Bench, deadline: float) -> dict:
    s = bench.sizes
    engine = bench.engine()
    rng = random.Random(3)
    prompts = [random_ids(rng, s.share_prompt) for _ in range(s.share_prompts)]
    requests = [
        GenerationRequest(p, seed=1000 * i + g) for i, p in enumerate(prompts) for g in range(s.share_group)
    ]
    params = SamplingParams(max_new_tokens=s.share_new, temperature=1.0, ignore_eos=True)
    runs = {}
    for shared in (True, False):
        engine.config = engine.config.model_copy(update={"share_prompts": shared})
        runs["shared" if shared else "unshared"] = timed_generate(bench, requests, params)[0]
    engine.config = engine.config.model_copy(update={"share_prompts": True})
    return {**runs, "speedup": runs["shared"]["tokens_per_s"] / runs["unshared"]["tokens_per_s"]}


def part_honesty(bench: Bench, deadline: float) -> dict:
    s = bench.sizes
    engine = bench.engine()
    rng = random.Random(4)
    prompts = [random_ids(rng, s.honest_prompt) for _ in range(s.honest_prompts)]
    requests = [
        GenerationRequest(p, seed=7919 * i + g) for i, p in enumerate(prompts) for g in range(s.honest_group)
    ]
    params = SamplingParams(max_new_tokens=s.honest_new, temperature=1.0, ignore_eos=True)
    engine.config = engine.config.model_copy(update={"hidden_states_device": "engine"})
    try:
        generation, generations = timed_generate(bench, requests, params)
    finally:
        engine.config = engine.config.model_copy(update={"hidden_states_device": "cpu"})
    bench.sync()
    started = time.perf_counter()
    proofs = build_proofs_batch([g.hidden_states for g in generations])
    bench.sync()
    proof_s = time.perf_counter() - started
    for g in generations:  # the validators need no worker-side states; free the GPU for them
        g.hidden_states = g.hidden_states[:0]
    model = engine.model
    bench.drop_engine()

    judged: dict[str, list[Measured]] = {}
    started = time.perf_counter()
    judged["cuda" if bench.cuda else "device"] = measure(
        "honest", model, generations, proofs, params, ValidatorConfig(prefill_batch_size=4)
    )
    device_validate_s = time.perf_counter() - started
    if bench.cuda:
        cpu_model = model.to("cpu")
        release(bench.device)
        judged["cpu"] = []
        step = 4
        for start in range(0, len(generations), step):
            if time.monotonic() > deadline - 10:
                break
            judged["cpu"] += measure(
                "honest",
                cpu_model,
                generations[start : start + step],
                proofs[start : start + step],
                params,
                ValidatorConfig(prefill_batch_size=step),
            )
    calibration = len(generations) // 4  # thresholds from the first quarter, false rejects on the rest
    report = {
        "completions": len(generations),
        "generation": generation,
        "proof_s": proof_s,
        "proof_fraction_of_generation": proof_s / generation["seconds"],
        "device_validation_s": device_validate_s,
    }
    for name, measured in judged.items():
        report[f"validator_{name}"] = _judge(measured, calibration)
    return report


def _judge(measured: list[Measured], calibration: int) -> dict:
    if not measured:
        return {"completions": 0}
    defaults = ValidatorConfig()
    calibrated_on = measured[: min(calibration, len(measured))]
    logprob_tolerance = max(1e-4, 4 * max(m.logprob_gap for m in calibrated_on))
    margin_tolerance = max(1e-4, 4 * max(0.0, -min(m.choice_margin for m in calibrated_on)))
    tested = measured[len(calibrated_on) :] or measured

    def rejects(items: list[Measured], logprob: float, margin: float) -> int:
        return sum(not m.toploc_ok or m.logprob_gap > logprob or m.choice_margin < -margin for m in items)

    return {
        "completions": len(measured),
        "toploc_pass": sum(m.toploc_ok for m in measured) / len(measured),
        "worst_exponent_match": min(m.exponent_match for m in measured),
        "worst_mantissa_mean": max(m.mantissa_mean for m in measured),
        "max_logprob_gap": max(m.logprob_gap for m in measured),
        "min_choice_margin": min(m.choice_margin for m in measured),
        "false_rejects_default_thresholds": rejects(
            measured, defaults.logprob_tolerance, defaults.choice_margin_tolerance
        ),
        "calibrated_logprob_tolerance": logprob_tolerance,
        "calibrated_margin_tolerance": margin_tolerance,
        "false_rejects_calibrated": rejects(tested, logprob_tolerance, margin_tolerance),
        "judged_with_calibrated": len(tested),
    }


def part_memory(bench: Bench, deadline: float) -> dict:
    s = bench.sizes
    bench.drop_engine()
    model = bench.build("qwen2.5-7b")
    config = shape_config("qwen2.5-7b")
    engine = PagedEngine(
        model,
        PagedEngineConfig(
            max_num_seqs=s.memory_rows,
            gpu_memory_fraction=bench.args.memory_gpu_fraction,
            cpu_kv_cache_gib=s.memory_cpu_gib,
        ),
    )
    runner = engine.runner
    capacity = runner.pool.num_blocks * runner.block_size
    pool_bytes = runner.pool.num_blocks * runner.block_size * runner.model.pool_shape.bytes_per_slot()
    per_token = kv_bytes_per_token(engine.model.config)
    max_length = config.max_position_embeddings
    # A max-length preallocated cache reserves every row's 32,768 positions up front, in the same memory.
    preallocated_rows = pool_bytes // (max_length * per_token)
    context = capacity // s.memory_rows - runner.block_size  # leave each row its last partial block
    prompt = context - s.memory_new
    rng = random.Random(5)
    requests = [GenerationRequest(random_ids(rng, prompt), seed=i) for i in range(s.memory_rows)]
    bench._engine = engine  # timed_generate runs the engine in hand
    try:
        run, _ = timed_generate(bench, requests, SamplingParams(max_new_tokens=s.memory_new, ignore_eos=True))
    finally:
        bench.drop_engine()
    return {
        "weights_bytes": model_bytes(engine.model),
        "kv_pool_bytes": pool_bytes,
        "paged_capacity_tokens": capacity,
        "paged_run": {"rows": s.memory_rows, "context": context, **run},
        "preallocated_max_length": max_length,
        "preallocated_rows": preallocated_rows,
        "preallocated_tokens_reserved": preallocated_rows * max_length,
    }


FUNCTIONS: dict[str, Callable[[Bench, float], dict]] = {name: globals()[f"part_{name}"] for name in PARTS}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}"
    )
    parser.add_argument("--out", type=Path, default=Path("."), help="directory for engine_gpu.json")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--gpu-memory-fraction",
        type=float,
        default=0.5,
        help="the shared Qwen3-0.6B engine's grant; the rest is HF generate's and the validators' room",
    )
    parser.add_argument(
        "--memory-gpu-fraction",
        type=float,
        default=0.9,
        help="the grant of the Qwen2.5-7B engine (memory part)",
    )
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiplies every part's time budget")
    parser.add_argument("--dry-run", action="store_true", help="toy sizes and a cut-down model (CPU tests)")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown parts {unknown}; choose from {','.join(PARTS)}")
    args.parts = parts
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    bench = Bench(args, Sizes.dry() if args.dry_run else Sizes(), torch.device(args.device))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "engine_gpu.json"
    environment = {
        "part": "environment",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(bench.device) if bench.cuda else "cpu",
        "dry_run": args.dry_run,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    bench.results.append(environment)
    for name in args.parts:
        started = time.monotonic()
        record: dict = {"part": name}
        try:
            record.update(FUNCTIONS[name](bench, started + BUDGETS[name] * args.budget_scale))
            record["status"] = "ok"
        except Exception:  # one part's failure must not cost the others their figures
            record["status"] = "error"
            record["error"] = traceback.format_exc()[-3000:]
        record["seconds"] = time.monotonic() - started
        environment.update(bench.engine_info)
        bench.results.append(record)
        path.write_text(json.dumps(bench.results, indent=2, default=str))
        print(f"[{name}] {record['status']} in {record['seconds']:.0f} s: {headline(record)}", flush=True)
    return bench.results


def headline(record: dict) -> str:
    if record["status"] != "ok":
        return record["error"].strip().splitlines()[-1]
    part = record["part"]
    if part in ("nano_vllm", "batch16"):
        return (
            f"swarmrl {record['swarmrl']['tokens_per_s']:.0f} tok/s, HF {record['hf_generate']['tokens_per_s']:.0f} "
            f"tok/s ({record['hf_generate']['rows']} rows): {record['ratio']:.2f}x"
        )
    if part == "roofline":
        return (
            f"step {record['step_s'] * 1e3:.2f} ms vs roofline {record['roofline_step_s'] * 1e3:.2f} ms: "
            f"{100 * record['fraction_of_roofline']:.0f}% ({record['decode_tokens_per_s']:.0f} of "
            f"{record['roofline_tokens_per_s']:.0f} tok/s)"
        )
    if part == "sharing":
        return (
            f"shared {record['shared']['tokens_per_s']:.0f} tok/s, unshared {record['unshared']['tokens_per_s']:.0f}"
            f" tok/s: {record['speedup']:.2f}x"
        )
    if part == "honesty":
        judged = [
            f"{k}: {v.get('false_rejects_calibrated')} false rejects of {v.get('judged_with_calibrated')}"
            for k, v in record.items()
            if k.startswith("validator_")
        ]
        return f"proofs {100 * record['proof_fraction_of_generation']:.1f}% of generation; " + "; ".join(
            judged
        )
    if part == "memory":
        run = record["paged_run"]
        return (
            f"paged {record['paged_capacity_tokens']} tokens ({run['rows']} rows x {run['context']}), "
            f"preallocated to {record['preallocated_max_length']}: {record['preallocated_rows']} rows"
        )
    if part == "copy_bandwidth":
        return f"{record['bytes_per_s'] / 1e12:.2f} TB/s"
    if part == "tests":
        return record["summary"]
    return ""


if __name__ == "__main__":
    main()
