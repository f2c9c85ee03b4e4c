"""`swarmrl serve` under concurrent clients against the paged engine's offline rate, same model, same run.

    .venv/bin/python benchmarks/serve_concurrency.py                      # configs/demo.toml's tiny model, CPU
    .venv/bin/python benchmarks/serve_concurrency.py --levels 1,16,64 --requests 64 --max-tokens 48

Both sides run torch on `--threads` threads (default 1, as engine_bench.py: on a shared 2-core machine idle
threads' spinning would count as work), the clients' HTTP on the rest. The model is the config's
`[model.tiny]` (random weights, a tokenizer trained here), saved to a temporary
directory. Anchor, per level: `PagedEngine.generate` in this process over the same requests in batches of that
many (the engine's offline rate with as many requests in flight, no HTTP; median of 3 after a warm-up run),
and one request alone (the offline latency, median of 8). Then `swarmrl serve` runs as its own process and
each level's clients send the same requests (four rounds of them: at least 16, at most --requests) through
HTTP (`/v1/completions`, whole responses), each client one request after another (a warm-up pass first).
Every request has its own seed, so the server's completions are the offline ones (each completion's length is
compared), and throughput figures compare like with like.

Printed per level: completion tokens per second of wall time, offline and served, and their ratio; the same
per second of CPU time (this process's for the offline run, the server process's for the served one: the
steadier figure on a shared machine; the clients' own CPU is not counted); request latency p50 / p95 and
p50's ratio to the offline single-request time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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


def per_level(level: int, requests: int) -> int:
    """Requests a level sends: four rounds of its clients (at least 16), at most --requests."""
    return min(requests, max(16, 4 * level))


def offline(directory: Path, texts: list[str], seeds: list[int], max_tokens: int, levels: list[int]) -> dict:
    """Tokens per second of `generate` over the requests in batches of each level (a level's clients keep that
    many requests in flight; the engine alone, with no HTTP), and the median time of one request alone."""
    tokenizer = load_tokenizer(directory)
    stops = prompt_format(tokenizer, PromptSection()).stop_token_ids
    engine = PagedEngine(load_model(directory), eos_token_id=stops)
    params = SamplingParams(max_new_tokens=max_tokens, stop_token_ids=stops)
    requests = [
        GenerationRequest(tokenizer(t).input_ids, sample_seed(s, 0, 0))
        for t, s in zip(texts, seeds, strict=True)
    ]
    engine.generate(requests, params)  # warm-up: the KV pool's blocks are zeroed on first use
    rates, cpu_rates, lengths = {}, {}, {}
    for level in levels:
        share, runs, cpu = requests[: per_level(level, len(requests))], [], []
        for _ in range(3):
            started, cpu_started = time.perf_counter(), time.process_time()
            chunks = [engine.generate(share[i : i + level], params) for i in range(0, len(share), level)]
            runs.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        lengths[level] = [len(g.completion_ids) for chunk in chunks for g in chunk]
        rates[level] = sum(lengths[level]) / statistics.median(runs)
        cpu_rates[level] = sum(lengths[level]) / statistics.median(cpu)
    alone = []
    for request in requests[:8]:
        started = time.perf_counter()
        engine.generate([request], params)
        alone.append(time.perf_counter() - started)
    return {
        "tokens_per_s": rates,
        "tokens_per_cpu_s": cpu_rates,
        "single_s": statistics.median(alone),
        "lengths": lengths,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def start_server(directory: Path, work: Path, threads: int) -> tuple[subprocess.Popen, str]:
    url_file = work / "url"
    log = (work / "serve.log").open("w")
    args = ["serve", "--model", str(directory), "--port", "0", "--url-file", str(url_file), "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}  # torch's intra-op threads in the server
    process = subprocess.Popen([sys.executable, "-m", "swarmrl.cli", *args], stdout=log, stderr=log, env=env)
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
    parser.add_argument("--requests", type=int, default=64, help="most requests a level sends (4 per client)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, offline and in the server")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    levels = [int(level) for level in args.levels.split(",")]
    texts = prompts(args.requests)
    seeds = [1000 + i for i in range(args.requests)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build_model(args.config, work / "model")
        anchor = offline(work / "model", texts, seeds, args.max_tokens, levels)
        process, url = start_server(work / "model", work, args.threads)
        try:
            results = {}
            for level in levels:
                count, cpu_started = per_level(level, args.requests), cpu_seconds(process.pid)
                results[level] = asyncio.run(
                    clients(url, texts[:count], seeds[:count], args.max_tokens, level)
                )
                results[level]["cpu_s"] = cpu_seconds(process.pid) - cpu_started
        finally:
            process.terminate()
            process.wait(timeout=30)
    print(
        f"completions of at most {args.max_tokens} tokens; requests per level: "
        f"{', '.join(f'{level}: {per_level(level, args.requests)}' for level in levels)}; "
        f"one request alone, offline: {anchor['single_s'] * 1000:.0f} ms"
    )
    header = (
        "clients",
        "offline tok/s",
        "served tok/s",
        "ratio",
        "tok/CPU-s off",
        "tok/CPU-s srv",
        "CPU ratio",
    )
    header += ("p50 ms", "p95 ms", "p50/alone", "same length")
    print("  ".join(f"{h:>13}" for h in header))
    for level, result in results.items():
        rate, cpu_rate = anchor["tokens_per_s"][level], anchor["tokens_per_cpu_s"][level]
        served_cpu_rate = sum(result["lengths"]) / result["cpu_s"]
        same = sum(a == b for a, b in zip(result["lengths"], anchor["lengths"][level], strict=True))
        row = (
            level,
            f"{rate:.0f}",
            f"{result['tokens_per_s']:.0f}",
            f"{result['tokens_per_s'] / rate:.2f}",
            f"{cpu_rate:.0f}",
            f"{served_cpu_rate:.0f}",
            f"{served_cpu_rate / cpu_rate:.2f}",
            f"{result['p50_s'] * 1000:.0f}",
            f"{result['p95_s'] * 1000:.0f}",
            f"{result['p50_s'] / anchor['single_s']:.2f}",
            f"{same}/{len(result['lengths'])}",
        )
        print("  ".join(f"{str(v):>13}" for v in row))


if __name__ == "__main__":
    main()
