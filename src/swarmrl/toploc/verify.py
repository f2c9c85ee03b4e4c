"""Validator side: check committed proofs against the validator's own recomputation of the hidden states.

Per chunk the validator takes its own top-k indices, evaluates the committed polynomial at index mod m and
compares bf16 fields with its own values at those indices: sign and exponent must agree (an "exponent match"),
and over the matched points the 7-bit mantissas may differ a little (different kernels, batch shapes, GPUs).
Unlike the reference, the sign bit is compared, indices are reduced mod m on every path, and points well
inside the top-k (which an honest prover certainly committed) must match closely — see VerifyThresholds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from swarmrl.configs.toploc import VerifyThresholds
from swarmrl.toploc.build import DEFAULT_CHUNK_SIZE
from swarmrl.toploc.encoding import DEFAULT_TOPK, decode_proofs
from swarmrl.toploc.errors import HiddenStatesError
from swarmrl.toploc.field import evaluate
from swarmrl.toploc.layout import ChunkSpan, check_hidden_states, check_topk, chunk_spans
from swarmrl.toploc.points import ChunkPoints, select_points

_SIGN_BIT = 0x8000
_EXPONENT_BITS = 0x7F80
_MANTISSA_BITS = 0x007F
_MAGNITUDE_BITS = 0x7FFF
# Above any 7-bit mantissa difference: sorts unmatched points after matched ones.
_UNMATCHED = 1 << 8


@dataclass(frozen=True)
class ChunkCheck:
    """One chunk's comparison. `points`: values the chunk commits (topk, or fewer in a tiny chunk);
    `exponent_matches`: points whose sign and exponent bits both equal the committed ones; `sign_mismatches`:
    points with equal exponent but opposite sign; `interior_*`: points well inside the top-k and how many of
    them carry a committed value beyond tolerance; mantissa statistics over the exponent-matched points
    (inf when none match)."""

    proof_index: int
    span: ChunkSpan
    points: int
    exponent_matches: int
    sign_mismatches: int
    interior_points: int
    interior_mismatches: int
    mantissa_diff_mean: float
    mantissa_diff_median: float
    ok: bool
    reason: str


@dataclass(frozen=True)
class VerifyReport:
    """The verdict on one completion's proofs; `reason` is empty when ok."""

    ok: bool
    reason: str
    chunks: tuple[ChunkCheck, ...]

    @property
    def failed_chunks(self) -> tuple[ChunkCheck, ...]:
        return tuple(chunk for chunk in self.chunks if not chunk.ok)


def verify_proofs(
    proofs: Sequence[bytes],
    completion_hidden: torch.Tensor,
    *,
    prompt_hidden: torch.Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
    thresholds: VerifyThresholds | None = None,
) -> VerifyReport:
    """Check a worker's proofs against the validator's hidden states (same layout as `build_proofs`).

    Raises ProofFormatError on malformed proof bytes and HiddenStatesError on unusable hidden states; a proof
    count that does not fit the states, or chunks that do not match, give a failing report with its reason.
    """
    return verify_proofs_batch(
        [proofs],
        [completion_hidden],
        prompt_hidden=None if prompt_hidden is None else [prompt_hidden],
        chunk_size=chunk_size,
        topk=topk,
        thresholds=thresholds,
    )[0]


def verify_proofs_batch(
    proofs: Sequence[Sequence[bytes]],
    completion_hidden: Sequence[torch.Tensor],
    *,
    prompt_hidden: Sequence[torch.Tensor | None] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
    thresholds: VerifyThresholds | None = None,
) -> list[VerifyReport]:
    """`verify_proofs` for many completions: one polynomial evaluation for all their chunks, one report each."""
    check_topk(topk)
    thresholds = thresholds or VerifyThresholds()
    prompts = list(prompt_hidden) if prompt_hidden is not None else [None] * len(completion_hidden)
    if not len(proofs) == len(completion_hidden) == len(prompts):
        raise HiddenStatesError(
            f"{len(proofs)} proof lists, {len(completion_hidden)} completions, {len(prompts)} prompts: counts differ"
        )
    reports: list[VerifyReport | None] = [None] * len(proofs)
    all_moduli, all_coefficients, all_spans, owners = [], [], [], []
    groups: dict[int, list[ChunkPoints]] = {}
    offset = 0
    for owner, (row_proofs, completion, prompt) in enumerate(
        zip(proofs, completion_hidden, prompts, strict=True)
    ):
        moduli, coefficients = decode_proofs(row_proofs, topk=topk)
        states = check_hidden_states(completion, prompt)
        spans = chunk_spans(
            states.completion_bits.shape[0],
            chunk_size=chunk_size,
            commit_prompt=prompt is not None,
            prompt_tokens=0 if states.prompt_bits is None else states.prompt_bits.shape[0],
        )
        if len(row_proofs) != len(spans):
            reports[owner] = VerifyReport(
                ok=False,
                reason=f"expected {len(spans)} proofs for {states.completion_bits.shape[0]} completion tokens "
                f"(chunk size {chunk_size}, prompt {'committed' if prompt is not None else 'not committed'}), "
                f"got {len(row_proofs)}",
                chunks=(),
            )
            continue
        for points in select_points(states, chunk_size=chunk_size, topk=topk):
            shifted = ChunkPoints(points.proof_positions + offset, points.indices, points.patterns)
            groups.setdefault(points.indices.shape[1], []).append(shifted)
        all_moduli.append(moduli)
        all_coefficients.append(coefficients)
        all_spans.extend(spans)
        owners.extend([owner] * len(spans))
        offset += len(spans)
    checks: dict[int, ChunkCheck] = {}
    if offset:
        moduli = np.concatenate(all_moduli)
        coefficients = np.concatenate(all_coefficients)
        for members in groups.values():
            points = ChunkPoints(
                np.concatenate([m.proof_positions for m in members]),
                np.concatenate([m.indices for m in members]),
                np.concatenate([m.patterns for m in members]),
            )
            checks.update(
                (c.proof_index, c) for c in _compare(points, moduli, coefficients, all_spans, thresholds)
            )
    per_owner: dict[int, list[ChunkCheck]] = {}
    base: dict[int, int] = {}
    for index in range(offset):
        owner = owners[index]
        base.setdefault(owner, index)
        check = checks[index]
        per_owner.setdefault(owner, []).append(dataclasses.replace(check, proof_index=index - base[owner]))
    for owner, chunks in per_owner.items():
        failed = [check for check in chunks if not check.ok]
        reason = (
            f"{len(failed)} of {len(chunks)} chunks failed; first: chunk {failed[0].proof_index}: {failed[0].reason}"
            if failed
            else ""
        )
        reports[owner] = VerifyReport(ok=not failed, reason=reason, chunks=tuple(chunks))
    done = [report for report in reports if report is not None]
    assert len(done) == len(reports)  # every owner had a report
    return done


def _compare(
    points: ChunkPoints,
    moduli: np.ndarray,
    coefficients: np.ndarray,
    spans: list[ChunkSpan],
    thresholds: VerifyThresholds,
) -> list[ChunkCheck]:
    positions = points.proof_positions
    k = points.indices.shape[1]
    committed = evaluate(coefficients[positions], points.indices % moduli[positions, None])
    own = points.patterns
    exponent_equal = (committed & _EXPONENT_BITS) == (own & _EXPONENT_BITS)
    sign_equal = (committed & _SIGN_BIT) == (own & _SIGN_BIT)
    matched = exponent_equal & sign_equal
    matches = matched.sum(axis=1)
    sign_mismatches = (exponent_equal & ~sign_equal).sum(axis=1)
    mantissa_diff = np.where(
        matched, np.abs((committed & _MANTISSA_BITS) - (own & _MANTISSA_BITS)), _UNMATCHED
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(matched, mantissa_diff, 0).sum(axis=1) / matches
    # Upper median (element n//2 of the sorted matched differences), as the reference's C++ path computes it.
    medians = np.sort(mantissa_diff, axis=1)[np.arange(len(positions)), np.minimum(matches // 2, k - 1)]
    required = math.ceil(thresholds.min_exponent_match_fraction * k - 1e-9)

    # Points come in (|x| desc) order, so the last column holds the validator's k-th magnitude.
    own_magnitude = own & _MAGNITUDE_BITS
    committed_magnitude = committed & _MAGNITUDE_BITS
    interior = own_magnitude >= own_magnitude[:, -1:] + thresholds.interior_margin_ulps
    distance = np.where(
        sign_equal, np.abs(committed_magnitude - own_magnitude), committed_magnitude + own_magnitude
    )
    interior_points = interior.sum(axis=1)
    interior_mismatches = (interior & (distance > thresholds.value_tolerance_ulps)).sum(axis=1)

    checks = []
    for row, proof_index in enumerate(positions.tolist()):
        count = int(matches[row])
        mean = float(means[row]) if count else math.inf
        median = float(medians[row]) if count else math.inf
        problems = []
        if count < required:
            problems.append(f"exponent matches {count}/{k} < {required}")
        if mean > thresholds.max_mantissa_diff_mean:
            problems.append(f"mantissa diff mean {mean:.2f} > {thresholds.max_mantissa_diff_mean}")
        if median > thresholds.max_mantissa_diff_median:
            problems.append(f"mantissa diff median {median:.1f} > {thresholds.max_mantissa_diff_median}")
        if int(sign_mismatches[row]) > thresholds.max_sign_mismatches:
            problems.append(f"sign mismatches {int(sign_mismatches[row])} > {thresholds.max_sign_mismatches}")
        if int(interior_mismatches[row]) > thresholds.max_interior_mismatches:
            problems.append(
                f"interior mismatches {int(interior_mismatches[row])}/{int(interior_points[row])} "
                f"> {thresholds.max_interior_mismatches}"
            )
        checks.append(
            ChunkCheck(
                proof_index=proof_index,
                span=spans[proof_index],
                points=k,
                exponent_matches=count,
                sign_mismatches=int(sign_mismatches[row]),
                interior_points=int(interior_points[row]),
                interior_mismatches=int(interior_mismatches[row]),
                mantissa_diff_mean=mean,
                mantissa_diff_median=median,
                ok=not problems,
                reason="; ".join(problems),
            )
        )
    return checks
