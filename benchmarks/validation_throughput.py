"""Validation throughput vs generation throughput on the demo model (goal: validate ≥ 10× faster).

A worker generates rollout files with the engine (seeded sampling + TOPLOC proofs); the validator runs every
check on the same files (signature, replay, assigned prompts, one prefill, TOPLOC, logprobs, seeded replay,
rewards). Both on one thread.

    python benchmarks/validation_throughput.py [--batches 8] [section.field=value ...]

Overrides apply to configs/demo.toml, e.g. `sft.steps=0 contract.max_new_tokens=256` for long completions
from an untrained policy (which rarely picks EOS), where decoding dominates generation as it does in real runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from swarmrl.configs import load_config
from swarmrl.generation.batch import generate_batch
from swarmrl.identity import Identity
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import load_model
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts import RolloutHeader, write_rollouts
from swarmrl.rollouts.assignment import BatchSpec, assigned_prompts
from swarmrl.validator.rollout_checks import validate_file
from swarmrl.validator.service import local_context

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("overrides", nargs="*", help="section.field=value for configs/demo.toml")
    args = parser.parse_args()
    torch.set_num_threads(1)
    node = Identity.generate()
    with tempfile.TemporaryDirectory(prefix="swarmrl-validation-") as tmp:
        config = load_config(
            REPO / "configs" / "demo.toml", [f"run.root='{tmp}'", "contract.async_level=0", *args.overrides]
        )
        rundir = prepare_run(config)
        context = local_context(rundir.root)
        engine = TorchEngine(load_model(rundir.checkpoints / "step_0"), policy_step=0)
        contract = config.contract
        params = SamplingParams(max_new_tokens=contract.max_new_tokens, temperature=contract.temperature)
        generated_tokens, generate_seconds, files = 0, 0.0, []
        for batch in range(args.batches):
            spec = BatchSpec.local(
                config.run.id,
                node.node_id,
                0,
                batch,
                contract.prompts_per_batch,
                contract.group_size,
                contract.seed,
            )
            prompts = assigned_prompts(
                spec, context.tasks, prompt_format(context.tokenizer, config.prompt), config.tasks
            )
            started = time.perf_counter()
            rows = generate_batch(engine, spec, prompts, params)
            generate_seconds += time.perf_counter() - started
            generated_tokens += sum(len(r.completion_ids) for r in rows)
            header = RolloutHeader(config.run.id, node.node_id, 0, batch)
            files.append(write_rollouts(rundir.rollouts(0) / f"b{batch}.parquet", header, rows, node))
        context.policy(0)  # load the checkpoint outside the timed loop, as a running validator has it
        started = time.perf_counter()
        verdicts = [validate_file(path, 0, context) for path in files]
        validate_seconds = time.perf_counter() - started
    assert all(v.accepted for v in verdicts), [v.reason for v in verdicts if not v.accepted]
    generated = generated_tokens / generate_seconds
    validated = generated_tokens / validate_seconds
    print(f"{args.batches} files, {generated_tokens} completion tokens, 1 thread, overrides {args.overrides}")
    print(f"worker   (generate + TOPLOC proofs): {generated:10.0f} tokens/s")
    print(f"validator (all checks, incl. rewards): {validated:10.0f} tokens/s")
    print(f"ratio validated/generated: {validated / generated:.2f}x")


if __name__ == "__main__":
    main()
