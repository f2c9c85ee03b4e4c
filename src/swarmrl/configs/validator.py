"""Thresholds of the validator's checks; the defaults come from `swarmrl validator calibrate` on the demo model
(benchmarks/RESULTS.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from swarmrl.configs.toploc import VerifyThresholds


class ValidatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    toploc: VerifyThresholds = Field(
        default_factory=VerifyThresholds, description="TOPLOC acceptance thresholds"
    )
    choice_margin_tolerance: float = Field(
        1e-4,
        ge=0,
        description="a token passes the seeded-sampling replay when its Gumbel-max margin is ≥ −tolerance "
        "(`swarmrl validator calibrate` measures the honest margins, benchmarks/RESULTS.md; the floor covers "
        "near-ties)",
    )
    max_replay_mismatches: int = Field(
        0, ge=0, description="tokens per file allowed to fail the seeded replay beyond the tolerance"
    )
    logprob_tolerance: float = Field(
        2e-4,
        gt=0,
        description="largest |engine logprob − recomputed logprob| accepted for any token: 4× the worst honest gap "
        "that `swarmrl validator calibrate` and benchmarks/gpu_cross_device.py measured (on CPU across kernels, "
        "threads and batch sizes, and between a CUDA worker and a CPU validator: benchmarks/RESULTS.md), well "
        "below the gap of bf16-weight cheating. Re-run the calibration for a fleet with other hardware.",
    )
    seeded_replay: bool = Field(
        True,
        description="workers sample with the seeded Gumbel-max sampler, so every token choice (EOS included) is "
        "replayed exactly; set False for unseeded engines, which then face the EOS-probability heuristic",
    )
    min_eos_probability: float = Field(
        0.1,
        ge=0,
        le=1,
        description="unseeded engines only: the model's EOS probability where a completion stops (INTELLECT-2: "
        "0.1). With seeded replay an honest sample may stop on a rarer EOS (p = 0.04 seen on the demo model)",
    )
    temperature_tolerance: float = Field(
        1e-4, ge=0, description="allowed difference from the run's temperature"
    )
    prefill_batch_size: int = Field(
        32, ge=1, description="sequences per forward pass of the validator's prefill"
    )
    max_file_seconds: float = Field(
        120.0,
        gt=0,
        description="validator seconds one file may take, all checks together; a file still being judged then is "
        "rejected by `time_budget` (an environment replay already running finishes its row first). The "
        "environment replay is the dear part: size it above rows × tool calls × a tool run's usual seconds ÷ "
        "env.max_concurrent_steps, plus the prefill",
    )
    reward_bounds: tuple[float, float] = Field(
        (-1.0, 1.0), description="trusted rewards must lie in [lo, hi]"
    )
