"""Which step a local worker's next file goes to: the step that needs it soonest, never a step already full
while an earlier one waits, and never more files than a step uses while the trainer is still behind."""

from pathlib import Path

from swarmrl.config import load_config
from swarmrl.rundir import RunDir
from swarmrl.worker.local import BatchWriter, first_open_step, next_step

REPO = Path(__file__).resolve().parents[3]


def config(tmp_path, *overrides):
    return load_config(
        REPO / "configs" / "demo.toml",
        [
            f"run.root='{tmp_path}'",
            "trainer.steps=10",
            "trainer.prompts_per_step=32",
            "worker.prompts_per_batch=16",
            "worker.async_level=2",
            *overrides,
        ],
    )


def add_files(rundir, step, count, worker=0):
    directory = rundir.rollouts(step)
    directory.mkdir(parents=True, exist_ok=True)
    start = len(list(directory.glob(f"w{worker}-b*.parquet")))
    for i in range(start, start + count):
        (directory / f"w{worker}-b{i:04d}.parquet").write_bytes(b"")


def complete(rundir, step, files):
    rundir.mark_complete(step, {"files": files, "outcomes": {f"f{i}": "trained" for i in range(files)}})


def test_files_go_to_the_first_open_step_until_it_has_what_a_step_uses(tmp_path):
    cfg = config(tmp_path)
    rundir = RunDir(cfg.run.directory)
    # No step completed yet: a step uses 32 / 16 = 2 files.
    assert next_step(rundir, cfg, 0, policy_step=0) == 0
    add_files(rundir, 0, 2)
    assert next_step(rundir, cfg, 0, policy_step=0) == 1
    add_files(rundir, 1, 1, worker=1)
    assert next_step(rundir, cfg, 0, policy_step=0) == 1
    add_files(rundir, 1, 1)
    assert next_step(rundir, cfg, 0, policy_step=0) == 2


def test_the_async_window_bounds_how_far_ahead_and_the_current_step_takes_the_rest(tmp_path):
    cfg = config(tmp_path)
    rundir = RunDir(cfg.run.directory)
    for step in range(3):
        add_files(rundir, step, 2)
    # Policy 0 may serve steps 0..2, all with their files: the extra file goes to the step being collected.
    assert next_step(rundir, cfg, 0, policy_step=0) == 0
    # A newer policy opens step 3.
    assert next_step(rundir, cfg, 0, policy_step=1) == 3


def test_a_step_uses_as_many_files_as_the_last_completed_one_took(tmp_path):
    cfg = config(tmp_path)
    rundir = RunDir(cfg.run.directory)
    add_files(rundir, 0, 4)
    complete(rundir, 0, files=4)  # many groups had equal rewards: step 0 took 4 files
    assert first_open_step(rundir, cfg.trainer.steps) == 1
    add_files(rundir, 1, 3)
    assert next_step(rundir, cfg, 1, policy_step=1) == 1
    add_files(rundir, 1, 1)
    assert next_step(rundir, cfg, 1, policy_step=1) == 2


def test_the_last_step_is_the_end_of_the_window(tmp_path):
    cfg = config(tmp_path, "trainer.steps=2")
    rundir = RunDir(cfg.run.directory)
    add_files(rundir, 0, 2)
    add_files(rundir, 1, 2)
    assert next_step(rundir, cfg, 0, policy_step=0) == 0
    complete(rundir, 0, files=2)
    complete(rundir, 1, files=2)
    assert first_open_step(rundir, cfg.trainer.steps) == 2  # every step served: the worker stops


def test_batch_indices_continue_after_a_restart(tmp_path):
    cfg = config(tmp_path)
    rundir = RunDir(cfg.run.directory)
    writer = BatchWriter(cfg, rundir, 0, None, None, (), None, None)
    assert writer.next_batch_index(0) == 0
    add_files(rundir, 0, 3)
    add_files(rundir, 0, 5, worker=1)
    assert writer.next_batch_index(0) == 3
