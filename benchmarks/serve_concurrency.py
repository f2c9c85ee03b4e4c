"""`swarmrl serve` under concurrent clients against the paged engine's offline rate, same model, same run.

    .venv/bin/python benchmarks/serve_concurrency.py                      # configs/demo.toml's tiny model, CPU
    .venv/bin/python benchmarks/serve_concurrency.py --levels 1,16,64 --requests 64 --max-tokens 48

The model is the config's `[model.tiny]` (random weights, a tokenizer trained here), saved to a temporary
directory. Anchor: `PagedEngine.generate` over every request at once in this process (the offline rate a
worker's batch gets; median of 3 after a warm-up run), and one request alone (the offline latency, median of
8). Then `swarmrl serve` runs as its own
process and `--levels` clients send the same requests through HTTP (`/v1/completions`, whole responses), each
client one request after another. Every request has its own seed, so the server's completions are the
offline ones token for token (checked), and throughput figures compare like with like.

Printed per level: completion tokens per second of wall time and its ratio to the offline rate, request
latency p50 / p95 and p50's ratio to the offline single-request time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

from swarmrl.configs import load_config
from swarmrl.configs.model import PromptSection
from swarmrl.inference import GenerationRequest, PagedEngine, SamplingParams
from swarmrl.models import (
    build_tiny_model,
    load_model,
    load_tokenizer,
    save_pretrained_atomic,
    train_tokenizer,
)
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts.assignment import sample_seed

WORDS = ("tree", "stone", "river", "cloud", "field", "light", "sound", "water")


def prompts(count: int) -> list[str]:
    return [f"The {WORDS[i % 8]} of {i} and the {WORDS[(i * 3 + 1) % 8]} we saw" for i in range(count)]


def build_model(config_path: str, directory: Path) -> None:
    config = load_config(config_path, [])
    torch.manual_seed(config.run.seed)
    texts = prompts(400) + [f"{a} {b}" for a in WORDS for b in WORDS]
    tokenizer = train_tokenizer(texts, vocab_size=config.model.tokenizer_vocab_size)
    save_pretrained_atomic(build_tiny_model(config.model.tiny, tokenizer), tokenizer, directory)


def offline(directory: Path, texts: list[str], seeds: list[int], max_tokens: int) -> dict[str, float]:
    tokenizer = load_tokenizer(directory)
    stops = prompt_format(tokenizer, PromptSection()).stop_token_ids
    engine = PagedEngine(load_model(directory), eos_token_id=stops)
    params = SamplingParams(max_new_tokens=max_tokens, stop_token_ids=stops)
    requests = [
        GenerationRequest(tokenizer(t).input_ids, sample_seed(s, 0, 0))
        for t, s in zip(texts, seeds, strict=True)
    ]
    engine.generate(requests, params)  # warm-up: the KV pool's blocks are zeroed on first use
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        generations = engine.generate(requests, params)
        runs.append(time.perf_counter() - started)
    batch_s = statistics.median(runs)
    alone = []
    for request in requests[:8]:
        started = time.perf_counter()
        engine.generate([request], params)
        alone.append(time.perf_counter() - started)
    tokens = [len(g.completion_ids) for g in generations]
    return {"tokens_per_s": sum(tokens) / batch_s, "single_s": statistics.median(alone), "lengths": tokens}


async def clients(url: str, texts: list[str], seeds: list[int], max_tokens: int, level: int) -> dict:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(texts)):
        queue.put_nowait(index)
    latencies, lengths = [], {}

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            index = queue.get_nowait()
            body = {"prompt": texts[index], "max_tokens": max_tokens, "seed": seeds[index]}
            started = time.perf_counter()
            response = await http.post(f"{url}/v1/completions", json=body)
            response.raise_for_status()
            latencies.append(time.perf_counter() - started)
            lengths[index] = response.json()["usage"]["completion_tokens"]

    limits = httpx.Limits(max_connections=level)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(level)))
        wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "tokens_per_s": sum(lengths.values()) / wall,
        "p50_s": statistics.median(ordered),
        "p95_s": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "lengths": [lengths[i] for i in range(len(texts))],
    }


def start_server(directory: Path, work: Path) -> tuple[subprocess.Popen, str]:
    url_file = work / "url"
    log = (work / "serve.log").open("w")
    args = ["serve", "--model", str(directory), "--port", "0", "--url-file", str(url_file), "--device", "cpu"]
    process = subprocess.Popen([sys.executable, "-m", "swarmrl.cli", *args], stdout=log, stderr=log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if url_file.exists():
            try:
                if httpx.get(url_file.read_text() + "/health").status_code == 200:
                    return process, url_file.read_text()
            except httpx.TransportError:
                pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"swarmrl serve did not come up; its log: {work / 'serve.log'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/demo.toml", help="its [model.tiny] is the model served")
    parser.add_argument("--levels", default="1,16,64", help="concurrent clients, comma-separated")
    parser.add_argument("--requests", type=int, default=64, help="requests per level")
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    texts = prompts(args.requests)
    seeds = [1000 + i for i in range(args.requests)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build_model(args.config, work / "model")
        anchor = offline(work / "model", texts, seeds, args.max_tokens)
        process, url = start_server(work / "model", work)
        try:
            results = {
                level: asyncio.run(clients(url, texts, seeds, args.max_tokens, level)) for level in levels
            }
        finally:
            process.terminate()
            process.wait(timeout=30)
    print(
        f"offline engine: {anchor['tokens_per_s']:.0f} tokens/s over {args.requests} requests at once; "
        f"one request alone {anchor['single_s'] * 1000:.0f} ms"
    )
    print(
        f"{'clients':>7} {'tokens/s':>9} {'vs offline':>10} {'p50 ms':>8} {'p95 ms':>8} {'p50 vs alone':>12}  same tokens"
    )
    for level, result in results.items():
        print(
            f"{level:>7} {result['tokens_per_s']:>9.0f} {result['tokens_per_s'] / anchor['tokens_per_s']:>10.2f} "
            f"{result['p50_s'] * 1000:>8.0f} {result['p95_s'] * 1000:>8.0f} "
            f"{result['p50_s'] / anchor['single_s']:>12.2f}  {result['lengths'] == anchor['lengths']}"
        )


if __name__ == "__main__":
    main()
