"""The trainer GPU benchmark's whole per-shape path, run on a CPU with a cut-down shape, so the one scarce GPU
session that runs it does not find a bug first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).parents[3] / "benchmarks" / "bench_trainer_gpu.py"


@pytest.mark.slow
def test_smoke_run_goes_through_the_gpu_runs_path_and_writes_its_report(tmp_path) -> None:
    out = tmp_path / "trainer_gpu.json"
    subprocess.run(
        [sys.executable, str(_SCRIPT), "--smoke", "--out", str(out)],
        check=True,
        timeout=300,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    report = json.loads(out.read_text())
    assert report["device"].startswith("cpu") and report["measured_bf16_matmul_tflops"] is None
    (result,) = report["shapes"].values()
    # Two micro-batches of 256 tokens filled to 97% or more: the rows reached the packer and the optimizer.
    assert result["micro_batches"] >= 2 and result["tokens_per_step"] >= 0.97 * 512
    assert result["tokens_per_second"] > 0 and 0 < result["model_tflops_per_second"]
    assert result["loss"] == result["loss"]  # finite, not NaN
