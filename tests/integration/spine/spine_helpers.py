"""Shared set-up for the spine's integration tests: tiny configs, prepared runs, pre-generated rollouts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from swarmrl.configs import RunConfig, load_config
from swarmrl.generation.batch import write_batch
from swarmrl.identity import Identity
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.rollouts.assignment import BatchSpec
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir
from swarmrl.tasks.registry import build_tasks
from swarmrl.trainer.role import trainer_role

REPO = Path(__file__).resolve().parents[3]


def tiny_config(root: Path, name: str, *overrides: str) -> RunConfig:
    return load_config(
        REPO / "configs" / "demo.toml",
        [
            f"run.root='{root}'",
            f"run.name='{name}'",
            "model.tiny.hidden_size=32",
            "model.tiny.num_layers=2",
            "model.tiny.num_heads=2",
            "model.tiny.num_kv_heads=1",
            "sft.steps=60",
            "sft.batch_size=32",
            'tasks.sources=[{type="reasoning_gym",generator="spell_backward",size=2000,eval_size=50,'
            "generator_kwargs={min_word_len=3,max_word_len=5}}]",
            "trainer.prompts_per_step=8",
            "contract.prompts_per_batch=8",
            "contract.group_size=4",
            "contract.max_new_tokens=8",
            "trainer.max_wait_seconds=60",
            *overrides,
        ],
    )


def pregenerate(config: RunConfig, steps: int, batches: int) -> None:
    """Rollout files for training steps [0, steps), all from policy 0, written as a worker would."""
    rundir = RunDir(config.run.directory)
    start = checkpoint_dir(rundir.checkpoints, 0)
    tokenizer = load_tokenizer(start)
    engine = TorchEngine(load_model(start), policy_step=0)
    identity = Identity.from_seed(b"\x05" * 32)
    tasks = build_tasks(config.tasks)
    params = SamplingParams(
        max_new_tokens=config.contract.max_new_tokens, temperature=config.contract.temperature
    )
    for step in range(steps):
        for batch in range(batches):
            spec = BatchSpec.local(
                config.run.id,
                identity.node_id,
                step,
                batch,
                config.contract.prompts_per_batch,
                config.contract.group_size,
                config.contract.seed,
            )
            path = rundir.rollouts(step) / f"pre-b{batch:04d}.parquet"
            write_batch(engine, spec, tasks, tokenizer, config, params, path, identity)


def train_beside_a_worker(rundir: RunDir, log_path: Path) -> int:
    """The trainer of `rundir` in this process (so tests can patch it) with one worker process beside it,
    stopped by PID however training ends; returns the trainer's last step once the worker exited cleanly."""
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "swarmrl.cli", "worker", "--run-dir", str(rundir.root), "--index", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            last = trainer_role(rundir.root)
        finally:
            rundir.stop_file.touch()
            try:
                worker.wait(timeout=60)
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(timeout=10)
    assert worker.returncode == 0, log_path.read_text()[-2000:]
    return last
