"""Generation throughput on CPU: the paged engine vs the padded engine vs HF `generate`, one thread.

    .venv/bin/python benchmarks/engine_bench.py --preset demo     # the demo's model and worker batch
    .venv/bin/python benchmarks/engine_bench.py --preset 6m       # 6M parameters, 64-token completions

Workload: GRPO-shaped, `--prompts` prompts × `--group` completions each (the demo's worker batch is 16 × 8),
prompts 20-35 tokens, EOS honoured. Anchors: HF `model.generate(do_sample=True)` as is, and with the per-token
scores and hidden states a worker needs (`output_scores`, `output_hidden_states`). Both swarmrl engines
return seeded samples, per-token logprobs and bf16 final hidden states. Figures are tokens generated per second
of wall time and per second of this process's CPU time (median of --repeats runs); on a shared machine the
CPU-time figure is the steadier one.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from swarmrl.configs.model import TinyModelSpec
from swarmrl.inference import GenerationRequest, PagedEngine, SamplingParams, TorchEngine
from swarmrl.models import build_tiny_model, train_tokenizer

PRESETS = {
    # configs/demo.toml's model and worker batch
    "demo": dict(hidden=96, layers=4, vocab=280, new_tokens=8, prompts=16, group=8),
    # ~6M parameters
    "6m": dict(hidden=256, layers=6, vocab=384, new_tokens=64, prompts=16, group=8),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="demo")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    torch.set_num_threads(args.threads)

    texts = [f"What is {a} plus {b}? The answer is {a + b}." for a in range(40) for b in range(20)]
    tokenizer = train_tokenizer(texts, vocab_size=preset["vocab"])
    spec = TinyModelSpec(
        hidden_size=preset["hidden"], num_layers=preset["layers"], num_heads=4, num_kv_heads=2
    )
    model = build_tiny_model(spec, tokenizer).eval()
    generator = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(
            3, len(tokenizer), (int(torch.randint(20, 36, (1,), generator=generator)),), generator=generator
        ).tolist()
        for _ in range(preset["prompts"])
    ]
    rows = [p for p in prompts for _ in range(preset["group"])]
    params_count = sum(p.numel() for p in model.parameters())
    print(
        f"model: qwen2 hidden {preset['hidden']}, {preset['layers']} layers, {params_count / 1e6:.2f}M params, "
        f"vocab {len(tokenizer)}; {preset['prompts']} prompts x {preset['group']} completions, "
        f"{preset['new_tokens']} new tokens, {args.threads} thread(s)"
    )
    params = SamplingParams(max_new_tokens=preset["new_tokens"], temperature=1.0)
    requests = [GenerationRequest(p, seed=i) for i, p in enumerate(rows)]

    def engine_run(engine) -> Callable[[], int]:
        return lambda: sum(len(g.completion_ids) for g in engine.generate(requests, params))

    width = max(len(p) for p in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(rows):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        attention_mask[row, width - len(prompt) :] = 1

    def hf_run(with_outputs: bool) -> int:
        with torch.inference_mode():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=preset["new_tokens"],
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                return_dict_in_generate=with_outputs,
                output_scores=with_outputs,
                output_hidden_states=with_outputs,
            )
        sequences = out.sequences if with_outputs else out
        generated = sequences[:, width:]
        # Rows stop at their first EOS (included); HF pads after it.
        is_eos = generated == tokenizer.eos_token_id
        lengths = torch.where(is_eos.any(-1), is_eos.int().argmax(-1) + 1, generated.shape[1])
        return int(lengths.sum())

    runs = {
        "hf_generate": lambda: hf_run(False),
        "hf_generate+scores+hidden": lambda: hf_run(True),
        "swarmrl_padded_engine": engine_run(TorchEngine(model)),
        "swarmrl_paged_engine": engine_run(PagedEngine(model)),
    }
    wall_rates: dict[str, float] = {}
    cpu_rates: dict[str, float] = {}
    for name, run in runs.items():
        run()  # warm-up
        wall, cpu = [], []
        for _ in range(args.repeats):
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            tokens = run()
            wall.append(tokens / (time.perf_counter() - wall_start))
            cpu.append(tokens / (time.process_time() - cpu_start))
        wall_rates[name], cpu_rates[name] = statistics.median(wall), statistics.median(cpu)
        print(f"{name:28s} {wall_rates[name]:8.0f} tokens/s wall  {cpu_rates[name]:8.0f} tokens/CPU-s")
    for anchor in ("swarmrl_padded_engine", "hf_generate", "hf_generate+scores+hidden"):
        print(
            f"ratio paged / {anchor}: {wall_rates['swarmrl_paged_engine'] / wall_rates[anchor]:.2f}x wall, "
            f"{cpu_rates['swarmrl_paged_engine'] / cpu_rates[anchor]:.2f}x CPU"
        )


if __name__ == "__main__":
    main()
