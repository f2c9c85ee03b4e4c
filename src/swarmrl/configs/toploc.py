"""Configuration of TOPLOC proofs: chunking, the committed top-k and the validator's acceptance thresholds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Beyond ~1k points an index-folding modulus in (2**15, 65497] that keeps them distinct rarely exists.
MAX_TOPK = 1024


class VerifyThresholds(BaseModel):
    """When one chunk's committed values count as a match for the validator's recomputation.

    Defaults are the reference acceptance rule (>= 90 of 128 exponents, mantissa difference mean <= 10 and
    median <= 8) plus a sign rule the reference lacks. Garbage points (indices the worker never committed,
    where the polynomial yields a random pattern) agree on the exponent by chance about 1 time in 256 and
    then differ in sign half the time, so allowing 2 sign mismatches keeps honest false rejects negligible
    while a flipped hidden state (every committed sign wrong) fails.

    The reference rule tolerates 38 garbage points anywhere, so moving a few large values (two token rows
    swapped) passes it. Honest disagreement about which points are in the top-k only happens near the k-th
    magnitude, so points clearly above it ("interior") must all carry a committed value close to the
    validator's own. Distances are counted in bf16 steps: for equal signs the difference of the 15-bit
    magnitude patterns, which stays meaningful across exponent boundaries. The tolerance (64 steps, a quarter
    to a half of the value) is loose because the rule targets garbage — a value the worker never committed
    lands within 64 steps of the truth about 1 time in 500 — while small systematic deviations are the
    mantissa statistics' job; the margin (32 steps) must exceed twice the largest honest per-value error.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_exponent_match_fraction: float = Field(
        90 / 128,
        ge=0.0,
        le=1.0,
        description="fraction of the top-k points whose sign and exponent bits must equal the committed ones",
    )
    max_mantissa_diff_mean: float = Field(
        10.0,
        ge=0.0,
        description="largest mean |mantissa difference| (7-bit field) over exponent-matched points",
    )
    max_mantissa_diff_median: float = Field(
        8.0,
        ge=0.0,
        description="largest median |mantissa difference| (upper median) over exponent-matched points",
    )
    max_sign_mismatches: int = Field(
        2, ge=0, description="most points whose exponent bits match but whose sign bit differs"
    )
    interior_margin_ulps: int = Field(
        32,
        ge=0,
        description="a point is interior when its magnitude lies this many bf16 steps above the validator's "
        "k-th largest; an honest prover (noise < half this) must have committed every interior point",
    )
    value_tolerance_ulps: int = Field(
        64,
        ge=0,
        description="largest distance in bf16 steps between an interior point and its committed value",
    )
    max_interior_mismatches: int = Field(
        0, ge=0, description="most interior points whose committed value is further than value_tolerance_ulps"
    )


class ToplocConfig(BaseModel):
    """How workers commit to their hidden states and how validators check the commitments."""

    model_config = ConfigDict(extra="forbid")

    chunk_size: int = Field(32, ge=1, description="decode tokens committed by one 258-byte proof")
    topk: int = Field(
        128, ge=1, le=MAX_TOPK, description="largest-magnitude hidden values committed per chunk"
    )
    commit_prompt: bool = Field(
        False, description="also commit the prompt positions' hidden states as one extra first proof"
    )
    thresholds: VerifyThresholds = Field(
        default_factory=VerifyThresholds, description="per-chunk acceptance rule used by validators"
    )
