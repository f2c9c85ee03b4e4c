"""A worker's start-up, from a fresh interpreter to its first generated tokens: the model loaded through
transformers (the anchor, what every worker did before) against swarmrl's transformers-free Llama-family model
(what a paged worker does now). Issue 35: a restarted node should be back at work within one lease period, and
on a busy machine start-up is mostly the CPU its imports take.

Each arm runs in its own fresh interpreter, alternating, `--rounds` times: import the worker's module, read
configs/demo-wan.toml and build its tasks (reasoning-gym's spell_backward, 20,000 drawn), load the tokenizer and
a demo-wan-shaped checkpoint (Qwen2, hidden 128, 4 layers), build the paged engine, generate one completion.
Wall and CPU seconds are the process's own, from its start; the table gives the medians. The third arm is a
restarted worker's before the tokenizer snapshot: its tasks read back from the cache its first start wrote
(`ReasoningGymSource`'s cache); the fourth a restarted worker's now, its tokenizer also read back from the
snapshot its first start wrote (`models/tokenizer_snapshot.py`), without importing transformers.

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
from swarmrl.configs import load_config
from swarmrl.tasks.registry import build_tasks
from pathlib import Path
path, arm, cache, snapshots = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
imported = time.time()
config = load_config(sys.argv[4], [])
tasks = build_tasks(config.tasks, cache=Path(cache) if cache else None)
tasks_s = time.time() - imported
if arm == "transformers":
    from swarmrl.models import load_model
    model = load_model(path)
else:
    from swarmrl.inference.factory import engine_model
    model = engine_model(PagedEngineConfig(), path)
if snapshots:
    from swarmrl.models.tokenizer_snapshot import worker_tokenizer
    tokenizer = worker_tokenizer(Path(path), Path(snapshots), config.prompt)
else:
    from swarmrl.models import load_tokenizer
    tokenizer = load_tokenizer(path)
engine = build_engine(PagedEngineConfig(), model, eos_token_id=tokenizer.eos_token_id)
engine.generate([GenerationRequest(tokenizer("hello", add_special_tokens=False).input_ids, seed=1)], SamplingParams(max_new_tokens=4))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"import_s": imported - started, "tasks_s": tasks_s, "ready_s": time.time() - started,
                  "cpu_s": usage.ru_utime + usage.ru_stime, "dynamo": "torch._dynamo" in sys.modules,
                  "gym": "reasoning_gym" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def make_checkpoint(root: Path) -> Path:
    from swarmrl.configs.model import TinyModelSpec
    from swarmrl.models import build_tiny_model, save_pretrained_atomic, train_tokenizer

    tokenizer = train_tokenizer(
        [f"spell {w} backwards" for w in ("apple", "river", "stone", "cloud")] * 50, 280
    )
    spec = TinyModelSpec(arch="qwen2", hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2)
    return save_pretrained_atomic(build_tiny_model(spec, tokenizer), tokenizer, root / "model")


MODULES = ("dynamo", "gym", "transformers")
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo-wan.toml"
# arm: (model loader, tasks read back from a cache, tokenizer read back from its snapshot)
ARMS = {
    "transformers": ("transformers", False, False),
    "native": ("native", False, False),
    "native+cache": ("native", True, False),
    "restarted": ("native", True, True),
}


def run_arm(path: Path, arm: str, cache: Path) -> dict:
    loader, cached, snapshot = ARMS[arm]
    started = time.time()
    snapshots = str(cache / "snapshots") if snapshot else ""
    result = subprocess.run(
        [sys.executable, "-c", ARM, str(path), loader, str(cache) if cached else "", str(CONFIG), snapshots],
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
        run_arm(path, "restarted", cache)  # a worker's first start, which writes the cache and the snapshot
        runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
        for _ in range(args.rounds):
            for arm in runs:
                runs[arm].append(run_arm(path, arm, cache))
    print(f"{platform.processor() or platform.machine()}, {args.rounds} rounds, medians (seconds)")
    keys = ("import_s", "tasks_s", "ready_s", "process_s", "cpu_s")
    print(
        f"{'arm':<14}"
        + "".join(f"{k[:-2]:>9}" for k in keys)
        + "  dynamo / reasoning-gym / transformers imported"
    )
    medians = {}
    for arm, figures in runs.items():
        medians[arm] = {key: statistics.median(f[key] for f in figures) for key in keys}
        m = medians[arm]
        imported = " ".join(f"{sum(f[name] for f in figures)}/{len(figures)}" for name in MODULES)
        print(f"{arm:<14}" + "".join(f"{m[k]:>9.2f}" for k in keys) + f"  {imported}")
    for arm, anchor in (
        ("native", "transformers"),
        ("native+cache", "transformers"),
        ("restarted", "native+cache"),
    ):
        ratios = ", ".join(
            f"{key[:-2]} {medians[arm][key] / medians[anchor][key]:.2f}x" for key in keys if key != "tasks_s"
        )
        print(f"{arm} / {anchor}: {ratios}")


if __name__ == "__main__":
    main()
