"""`swarmrl validator --once` over a run's rollout files: verdicts written once, accepted rows scored."""

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from integration.spine.spine_helpers import pregenerate, tiny_config

from swarmrl.launch.prepare import prepare_run
from swarmrl.rollouts import read_rollouts
from swarmrl.validator.service import run_validator, verdict_of


@pytest.mark.slow
def test_directory_is_judged_once_and_tampering_is_named(tmp_path, shared_sft):
    config = tiny_config(tmp_path, "run", "contract.async_level=4")
    shared_sft(config)
    rundir = prepare_run(config)
    pregenerate(config, steps=2, batches=2)
    tampered = rundir.rollouts(1) / "pre-b0001.parquet"
    table = pq.read_table(tampered)
    column = table.schema.get_field_index("temperature")
    hotter = pa.array([0.5] * len(table), pa.float32())
    pq.write_table(table.set_column(column, table.schema.field(column), hotter), tampered)

    def run():
        return subprocess.run(
            [sys.executable, "-m", "swarmrl.cli", "validator", "--run-dir", str(rundir.root), "--once"],
            capture_output=True,
            text=True,
            timeout=300,
        )

    first = run()
    assert first.returncode == 0, first.stderr[-2000:]
    assert "judged 4 file(s)" in first.stdout
    bad = verdict_of(tampered)
    assert not bad["accepted"] and bad["check"] == "schema_and_signature" and "signature" in bad["reason"]
    good = rundir.rollouts(0) / "pre-b0000.parquet"
    assert verdict_of(good)["accepted"]
    header, scored = read_rollouts(
        rundir.root / "accepted" / "step_0" / good.name, scored=True, require_signature=False
    )
    assert (
        header.policy_step == 0
        and len(scored) == config.contract.prompts_per_batch * config.contract.group_size
    )
    assert not (rundir.root / "accepted" / "step_1" / tampered.name).exists()

    # Judged once: a second pass reads the verdicts left on disk and judges nothing. It runs the same service
    # here, on a context of its own, rather than in a second process (most of whose 9 s is its imports).
    assert run_validator(rundir.root, None, once=True) == 0
