"""The GPU benchmark script's CPU-runnable parts: its arguments, and a dry run of every part on a cut-down
model, so the one scarce GPU session that runs it does not find a bug first."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

_SCRIPT = Path(__file__).parents[3] / "benchmarks" / "engine_gpu_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("engine_gpu_bench", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_arguments_name_parts_and_reject_unknown_ones() -> None:
    bench = _bench()
    args = bench.parse_args(["--parts", "roofline,memory", "--device", "cpu"])
    assert args.parts == ["roofline", "memory"] and args.gpu_memory_fraction == 0.5
    assert bench.parse_args([]).parts == list(bench.PARTS)
    with pytest.raises(SystemExit):
        bench.parse_args(["--parts", "roofline,warp_speed"])


@pytest.mark.slow
def test_a_dry_run_of_every_part_writes_every_figure(tmp_path) -> None:
    bench = _bench()
    parts = [p for p in bench.PARTS if p != "tests"]  # the GPU tests' own run is `make test-gpu`
    results = bench.main(["--dry-run", "--device", "cpu", "--out", str(tmp_path), "--parts", ",".join(parts)])
    written = json.loads((tmp_path / "engine_gpu.json").read_text())
    assert [r["part"] for r in written] == ["environment", *parts] == [r["part"] for r in results]
    by_part = {r["part"]: r for r in written}
    assert all(by_part[p]["status"] == "ok" for p in parts), [by_part[p].get("error") for p in parts]
    assert by_part["nano_vllm"]["ratio"] > 0 and by_part["batch16"]["hf_generate"]["rows"] == 3
    assert 0 < by_part["roofline"]["fraction_of_roofline"]
    assert (
        by_part["sharing"]["shared"]["prefilled_tokens"] < by_part["sharing"]["unshared"]["prefilled_tokens"]
    )
    honesty = by_part["honesty"]
    judged = honesty["validator_device"]
    assert honesty["completions"] == 8 and judged["toploc_pass"] == 1.0
    # Thresholds calibrated on 2 of the 8 completions, false rejects counted on the other 6: how many of those
    # bf16 logprob gaps exceed 4x the first two's depends on the CPU's bf16 kernels (1 of 6 on an AMD EPYC,
    # 0 on the earlier stops' machine). Whether honest work passes is the GPU run's figure (32 x 16
    # completions, RESULTS.md), not a dry run's; here the thresholds and the count must be reported.
    assert judged["calibrated_logprob_tolerance"] >= 1e-4 and judged["calibrated_margin_tolerance"] >= 1e-4
    assert judged["judged_with_calibrated"] == 6 and 0 <= judged["false_rejects_calibrated"] <= 6
    memory = by_part["memory"]
    assert memory["paged_run"]["preemptions"] == 0 and memory["paged_capacity_tokens"] > 0


def test_a_failing_part_is_recorded_and_the_others_still_run(tmp_path, monkeypatch) -> None:
    bench = _bench()

    def broken(bench_, deadline):
        raise RuntimeError("kernel exploded")

    monkeypatch.setitem(bench.FUNCTIONS, "roofline", broken)
    results = bench.main(
        ["--dry-run", "--device", "cpu", "--out", str(tmp_path), "--parts", "roofline,copy_bandwidth"]
    )
    assert results[1]["status"] == "error" and "kernel exploded" in results[1]["error"]
    assert results[2]["status"] == "ok"
