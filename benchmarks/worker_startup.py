"""A worker's start-up, from a fresh interpreter to its first generated tokens: the model loaded through
transformers (the anchor, what every worker did before) against swarmrl's transformers-free Llama-family model
(what a paged worker does now). Issue 35: a restarted node should be back at work within one lease period, and
on a busy machine start-up is mostly the CPU its imports take.

Each arm runs in its own fresh interpreter, alternating, `--rounds` times: import the worker's module, load the
tokenizer and a demo-wan-shaped checkpoint (Qwen2, hidden 128, 4 layers), build the paged engine, generate one
completion. Wall and CPU seconds are the process's own, from its start; the table gives the medians.

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
path, arm = sys.argv[1], sys.argv[2]
imported = time.time()
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
print(json.dumps({"import_s": imported - started, "ready_s": time.time() - started,
                  "cpu_s": usage.ru_utime + usage.ru_stime, "dynamo": "torch._dynamo" in sys.modules}))
"""


def make_checkpoint(root: Path) -> Path:
    from swarmrl.configs.model import TinyModelSpec
    from swarmrl.models import build_tiny_model, save_pretrained_atomic, train_tokenizer

    tokenizer = train_tokenizer(
        [f"spell {w} backwards" for w in ("apple", "river", "stone", "cloud")] * 50, 280
    )
    spec = TinyModelSpec(arch="qwen2", hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2)
    return save_pretrained_atomic(build_tiny_model(spec, tokenizer), tokenizer, root / "model")


def run_arm(path: Path, arm: str) -> dict:
    started = time.time()
    result = subprocess.run(
        [sys.executable, "-c", ARM, str(path), arm], capture_output=True, text=True, timeout=300, check=True
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
        runs: dict[str, list[dict]] = {"transformers": [], "native": []}
        for _ in range(args.rounds):
            for arm in runs:
                runs[arm].append(run_arm(path, arm))
    print(f"{platform.processor() or platform.machine()}, {args.rounds} rounds, medians (seconds)")
    print(f"{'arm':<14}{'import':>9}{'ready':>9}{'process':>9}{'cpu':>9}  dynamo imported")
    medians = {}
    for arm, figures in runs.items():
        medians[arm] = {
            key: statistics.median(f[key] for f in figures) for key in figures[0] if key != "dynamo"
        }
        m = medians[arm]
        dynamo = sum(f["dynamo"] for f in figures)
        print(
            f"{arm:<14}{m['import_s']:>9.2f}{m['ready_s']:>9.2f}{m['process_s']:>9.2f}{m['cpu_s']:>9.2f}"
            f"  {dynamo}/{len(figures)}"
        )
    anchor, ours = medians["transformers"], medians["native"]
    print(
        "native / transformers: "
        + ", ".join(
            f"{key[:-2]} {ours[key] / anchor[key]:.2f}x"
            for key in ("import_s", "ready_s", "process_s", "cpu_s")
        )
    )


if __name__ == "__main__":
    main()
