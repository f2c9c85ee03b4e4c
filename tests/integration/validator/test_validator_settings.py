"""The run config's [validator] section is what the validator judges with: the same honest file is rejected
under a reward range it cannot meet and accepted under the defaults."""

import subprocess
import sys

import pytest
from integration.spine.spine_helpers import pregenerate, tiny_config

from swarmrl.configs import load_run_config
from swarmrl.configs.validator import ValidatorConfig
from swarmrl.launch.prepare import prepare_run
from swarmrl.validator.service import run_validator, verdict_of


def judge(run_dir) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swarmrl.cli", "validator", "--run-dir", str(run_dir), "--once"],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_validator_section_reaches_the_validator(tmp_path):
    config = tiny_config(tmp_path, "run", "sft.steps=0", "validator.reward_bounds=[2.0, 3.0]")
    rundir = prepare_run(config)
    assert load_run_config(rundir.root).validator.reward_bounds == (2.0, 3.0)
    pregenerate(config, steps=1, batches=1)
    honest = rundir.rollouts(0) / "pre-b0000.parquet"

    first = judge(rundir.root)
    assert first.returncode == 0, first.stderr[-2000:]
    verdict = verdict_of(honest)
    assert not verdict["accepted"] and verdict["check"] == "rewards"
    assert "outside [2.0, 3.0]" in verdict["reason"]

    # The same file under the default section: every check passes. The same service judges it here, reading
    # the section from config.json again, rather than in a second process (most of whose 9 s is its imports).
    resolved = config.model_copy(update={"validator": ValidatorConfig()})
    (rundir.root / "config.json").write_text(resolved.dump_json())
    honest.with_suffix(".verdict.json").unlink()
    (rundir.root / "validator" / "seen.sqlite").unlink()  # else the replay check calls it a duplicate
    assert run_validator(rundir.root, None, once=True) == 1
    assert verdict_of(honest)["accepted"], verdict_of(honest)
