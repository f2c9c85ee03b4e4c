"""`trainer.generate_while_waiting`: a local trainer that has read every worker file of a step and still needs
groups generates a batch itself, written as the local worker after the launcher's last one."""

from __future__ import annotations

import json

import torch

from swarmrl.rollouts import RolloutLimits, read_rollouts
from swarmrl.rundir import RunDir
from swarmrl.trainer.role import trainer_role


def test_the_trainer_reads_worker_files_first_then_generates_what_the_step_still_needs(run_copy):
    torch.set_num_threads(1)
    config = run_copy("generating")
    config.worker.num_workers = 1
    config.trainer.generate_while_waiting = True
    rundir = RunDir(config.run.directory)
    (rundir.root / "config.json").write_text(config.model_dump_json(indent=2))
    # No worker process runs: step 0 keeps one worker file, step 1 none.
    for step in (0, 1):
        for path in rundir.rollout_files(step)[1 if step == 0 else 0 :]:
            path.unlink()

    assert trainer_role(rundir.root, stop_after_steps=2) == 2

    outcomes = [json.loads(rundir.complete_marker(s).read_text())["outcomes"] for s in (0, 1)]
    assert next(iter(outcomes[0])) == "pre-b0000.parquet"  # the worker's file is read before generating
    generated = [name for step in outcomes for name in step if not name.startswith("pre-")]
    assert generated and all(name.startswith("w1-b") for name in generated)  # worker 0's names stay free
    assert all(outcome == "trained" for step in outcomes for outcome in step.values())
    limits = RolloutLimits(require_proofs=False)
    for name in outcomes[1]:
        header, _ = read_rollouts(rundir.rollouts(1) / name, limits)
        assert header.policy_step == 1 and not header.proofs  # the trainer's newest policy, pushed in place
    assert rundir.read_metrics()[-1]["policy_lag"] == 0
