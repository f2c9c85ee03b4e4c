"""A worker's start-up, from a fresh interpreter to its first generated tokens: the model loaded through
transformers (the anchor, what every worker did before) against swarmrl's transformers-free Llama-family model
(what a paged worker does now). Issue 35: a restarted node should be back at work within one lease period, and
on a busy machine start-up is mostly the CPU its imports take.

Each arm runs in its own fresh interpreter, alternating, `--rounds` times: import the worker's module, read
configs/demo-wan.toml and build its tasks (reasoning-gym's spell_backward, 20,000 drawn), load the tokenizer and
a demo-wan-shaped checkpoint (Qwen2, hidden 128, 4 layers), build the paged engine, generate one completion.
Wall and CPU seconds are the process's own, from its start; the table gives the medians. The third arm is a
restarted worker's: its tasks read back from the cache its first start wrote (`ReasoningGymSource`'s cache).

    .venv/bin/python benchmarks/worker_startup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARM = """
import json, os, resource, sys, time
started = time.time()
import swarmrl.worker.node  # the worker's module and everything it imports
from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference import GenerationRequest, SamplingParams
from swarmrl.inference.factory import build_engine
from swarmrl.models import load_tokenizer
from swarmrl.configs import load_config
from swarmrl.tasks.registry import build_tasks
from pathlib import Path
path, arm, cache = sys.argv[1], sys.argv[2], sys.argv[3]
imported = time.time()
tasks = build_tasks(load_config(sys.argv[4], []).tasks, cache=Path(cache) if cache else None)
tasks_s = time.time() - imported
if arm == "transformers":
    from swarmrl.models import load_model
    model = load_model(path)
else:
    from swarmrl.inference.factory import engine_model
    model = engine_model(PagedEngineConfig(), path)
tokenizer = load_tokenizer(path)
engine = build_engine(PagedEngineConfig(), model, eos_token_id=tokenizer.eos_token_id)
engine.generate([GenerationRequest(tokenizer.encode("hello"), seed=1)], SamplingParams(max_new_tokens=4))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"import_s": imported - started, "tasks_s": tasks_s, "ready_s": time.time() - started,
                  "cpu_s": usage.ru_utime + usage.ru_stime, "dynamo": "torch._dynamo" in sys.modules,
                  "gym": "reasoning_gym" in sys.modules}))
"""


def make_checkpoint(root: Path) -> Path:
    from swarmrl.configs.model import TinyModelSpec
    from swarmrl.models import build_tiny_model, save_pretrained_atomic, train_tokenizer

    tokenizer = train_tokenizer(
        [f"spell {w} backwards" for w in ("apple", "river", "stone", "cloud")] * 50, 280
    )
    spec = TinyModelSpec(arch="qwen2", hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2)
    return save_pretrained_atomic(build_tiny_model(spec, tokenizer), tokenizer, root / "model")


CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo-wan.toml"
# arm: (model loader, tasks read back from a cache)
ARMS = {
    "transformers": ("transformers", False),
    "native": ("native", False),
    "native+cache": ("native", True),
}


def run_arm(path: Path, arm: str, cache: Path) -> dict:
    loader, cached = ARMS[arm]
    started = time.time()
    result = subprocess.run(
        [sys.executable, "-c", ARM, str(path), loader, str(cache) if cached else "", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["process_s"] = time.time() - started  # with the interpreter's own start
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = make_checkpoint(Path(tmp))
        cache = Path(tmp) / "cache"
        run_arm(path, "native+cache", cache)  # a worker's first start, which writes the cache
        runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
        for _ in range(args.rounds):
            for arm in runs:
                runs[arm].append(run_arm(path, arm, cache))
    print(f"{platform.processor() or platform.machine()}, {args.rounds} rounds, medians (seconds)")
    keys = ("import_s", "tasks_s", "ready_s", "process_s", "cpu_s")
    print(f"{'arm':<14}" + "".join(f"{k[:-2]:>9}" for k in keys) + "  dynamo / reasoning-gym imported")
    medians = {}
    for arm, figures in runs.items():
        medians[arm] = {key: statistics.median(f[key] for f in figures) for key in keys}
        m = medians[arm]
        dynamo, gym = sum(f["dynamo"] for f in figures), sum(f["gym"] for f in figures)
        print(
            f"{arm:<14}"
            + "".join(f"{m[k]:>9.2f}" for k in keys)
            + f"  {dynamo}/{len(figures)} {gym}/{len(figures)}"
        )
    anchor = medians["transformers"]
    for arm in ("native", "native+cache"):
        ratios = ", ".join(
            f"{key[:-2]} {medians[arm][key] / anchor[key]:.2f}x" for key in keys if key != "tasks_s"
        )
        print(f"{arm} / transformers: {ratios}")


if __name__ == "__main__":
    main()
