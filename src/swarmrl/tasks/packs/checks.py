"""The five admission checks as pure functions of what was measured: each returns its figures and limits.

loads     the pack parsed within every cap, and its verifier answered every completion, in time, the same way
          in two independent passes
leaking   answers are not in their prompts; prompts do not near-duplicate held-out evals or admitted packs
solvable  the reference solutions pass on a stated share of rows (without references: the policy's pass@k)
hackable  no generic cheat scores above a small mean
useful    the policy's solve rates put enough rows inside the run's band (measured from leased rollouts)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from swarmrl.configs.task_packs import AdmissionThresholdsConfig, PackLimitsConfig, VerifierBudgetConfig
from swarmrl.eval_metrics import pass_at_k
from swarmrl.tasks.packs.judging import Failure, Item, Outcome
from swarmrl.tasks.packs.near_duplicates import Match
from swarmrl.tasks.packs.pack import TaskPack
from swarmrl.tasks.packs.report import CheckResult, Figure

EXAMPLES = 3


@dataclass(frozen=True)
class PolicyMeasurement:
    """The run's policy on a pack's rows: per row id, (samples drawn, samples the pack's verifier passed)."""

    k: int
    samples: Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class VerifierRun:
    """What the verifier's sandbox passes measured (the probe's alone when it failed)."""

    items: Sequence[Item]
    outcomes: Sequence[Outcome]  # one per item: the score both passes agree on, or why not
    disagreements: int
    slowest_call_seconds: float
    slowest_call_items: int
    passes: int


def loads_static(pack: TaskPack, limits: PackLimitsConfig) -> CheckResult:
    summary = (
        f"{len(pack.rows)} rows ({pack.referenced_rows} with references), {pack.total_bytes} bytes, "
        f"{pack.manifest.verifier.kind} verifier, signed by its author"
    )
    return CheckResult.from_figures(
        "loads",
        summary,
        [
            Figure(name="rows", value=len(pack.rows), limit=limits.max_rows, bound="max"),
            Figure(name="bytes", value=pack.total_bytes, limit=limits.max_unpacked_bytes, bound="max"),
        ],
    )


def loads_refused(problem: str) -> CheckResult:
    return CheckResult(name="loads", status="fail", summary=problem)


def with_verifier(
    static: CheckResult, pack: TaskPack, run: VerifierRun, budget: VerifierBudgetConfig
) -> CheckResult:
    """The loads check, its static figures joined by how the verifier answered."""
    failures = [(index, o) for index, o in enumerate(run.outcomes) if isinstance(o, Failure)]
    answered = 1 - len(failures) / len(run.items) if run.items else 1.0
    figures = [
        *static.figures,
        Figure(
            name="share of completions scored, alike in every pass", value=answered, limit=1.0, bound="min"
        ),
        Figure(name="completions judged differently", value=run.disagreements, limit=0, bound="max"),
    ]
    scored = (
        f"{len(run.items) - len(failures)} of {len(run.items)} completions alike in {run.passes} pass(es)"
    )
    if pack.manifest.verifier.kind == "reward_function":
        figures.append(
            Figure(
                name="slowest call (s)",
                value=round(run.slowest_call_seconds, 3),
                limit=budget.max_call_seconds,
                bound="max",
            )
        )
        summary = (
            f"{static.summary}; the verifier scored {scored}, slowest call {run.slowest_call_seconds:.3f} s "
            f"({run.slowest_call_items} completions)"
        )
    else:
        summary = f"{static.summary}; the code judge scored {scored}"
    details = {
        "failed": [
            _item_text(pack, run.items[index], failure.reason) for index, failure in failures[:EXAMPLES]
        ]
    }
    return CheckResult.from_figures("loads", summary, figures, details if failures else None)


def leaking(
    pack: TaskPack,
    answer_leaks: Sequence[bool],
    matches: Sequence[Match | None],
    thresholds: AdmissionThresholdsConfig,
    compared: int = 0,
) -> CheckResult:
    rows = len(pack.rows)
    leaked = [pack.rows[index].row_id for index, leak in enumerate(answer_leaks) if leak]
    overlapping = [
        (pack.rows[index].row_id, match) for index, match in enumerate(matches) if match is not None
    ]
    figures = [
        Figure(
            name="share of rows with the answer in the prompt",
            value=len(leaked) / rows,
            limit=thresholds.max_answer_in_prompt_share,
            bound="max",
        ),
        Figure(
            name="share of rows near-duplicating held-out or admitted prompts",
            value=len(overlapping) / rows,
            limit=thresholds.max_overlap_share,
            bound="max",
        ),
    ]
    details = {}
    if leaked:
        details["answer in prompt"] = [f"row {row_id}" for row_id in leaked[:EXAMPLES]]
    if overlapping:
        details["near-duplicates"] = [
            f"row {row_id} ~ {match.label} (Jaccard {match.similarity:.2f})"
            for row_id, match in overlapping[:EXAMPLES]
        ]
    summary = (
        f"answer in prompt on {len(leaked)} of {rows} rows; {len(overlapping)} rows near-duplicate one of "
        f"{compared} held-out or admitted prompts"
    )
    return CheckResult.from_figures("leaking", summary, figures, details)


def solvable_by_references(
    pack: TaskPack, run: VerifierRun, reference_rows: Sequence[int], thresholds: AdmissionThresholdsConfig
) -> CheckResult:
    pass_score = pack.manifest.verifier.pass_score
    solved = {
        item.row
        for item, outcome in zip(run.items, run.outcomes, strict=True)
        if item.kind == "reference" and isinstance(outcome, float) and outcome >= pass_score
    }
    unsolved = [pack.rows[row].row_id for row in reference_rows if row not in solved]
    share = 1 - len(unsolved) / len(reference_rows)
    summary = f"references solve {len(reference_rows) - len(unsolved)} of {len(reference_rows)} rows judged (score >= {pass_score:g})"
    details = {"unsolved": [f"row {row_id}" for row_id in unsolved[:EXAMPLES]]} if unsolved else None
    figures = [
        Figure(
            name="share of rows solved", value=share, limit=thresholds.min_reference_pass_share, bound="min"
        )
    ]
    return CheckResult.from_figures("solvable", summary, figures, details)


def solvable_by_policy(
    policy: PolicyMeasurement | None, thresholds: AdmissionThresholdsConfig
) -> CheckResult:
    if policy is None or not policy.samples:
        return CheckResult(
            name="solvable",
            status="pending",
            summary="no reference solutions: needs the run's policy pass@k on the rows (leased rollouts)",
        )
    figures = [
        Figure(
            name=f"policy pass@{policy.k}",
            value=_mean_pass_at_k(policy),
            limit=thresholds.min_policy_pass_at_k,
            bound="min",
        )
    ]
    return CheckResult.from_figures(
        "solvable", f"the policy's pass@{policy.k} over {len(policy.samples)} rows", figures
    )


def _mean_pass_at_k(policy: PolicyMeasurement) -> float:
    """Mean over the rows sampled of the unbiased pass@k (k capped at a row's samples)."""
    values = [pass_at_k(n, c, min(policy.k, n)) for n, c in policy.samples.values() if n >= 1]
    return sum(values) / len(values) if values else 0.0


def hackable(run: VerifierRun, thresholds: AdmissionThresholdsConfig) -> CheckResult:
    scores: dict[str, list[float]] = defaultdict(list)
    for item, outcome in zip(run.items, run.outcomes, strict=True):
        if item.kind != "reference":
            # A cheat the verifier failed on earns nothing in a run; the failure itself fails `loads`.
            scores[item.kind].append(outcome if isinstance(outcome, float) else 0.0)
    means = {name: sum(values) / len(values) for name, values in scores.items()}
    figures = [
        Figure(name=f"mean score of {name}", value=mean, limit=thresholds.max_cheat_mean, bound="max")
        for name, mean in sorted(means.items(), key=lambda entry: -entry[1])
    ]
    worst = max(means, key=means.__getitem__)
    rows = len(next(iter(scores.values())))
    summary = (
        f"{len(means)} generic cheats on {rows} rows; the best scores {means[worst]:.3f} on average ({worst})"
    )
    return CheckResult.from_figures("hackable", summary, figures)


def useful(
    policy: PolicyMeasurement | None, band: tuple[float, float], thresholds: AdmissionThresholdsConfig
) -> CheckResult:
    if policy is None or not policy.samples:
        return CheckResult(
            name="useful",
            status="pending",
            summary=f"needs the run's policy solve rates on the rows (leased rollouts) against its band {list(band)}",
        )
    low, high = band
    rates = [c / n for n, c in policy.samples.values() if n >= 1]
    inside = sum(1 for rate in rates if low <= rate <= high)
    share = inside / len(rates) if rates else 0.0
    figures = [
        Figure(
            name=f"share of rows with a solve rate in {list(band)}",
            value=share,
            limit=thresholds.min_informative_share,
            bound="min",
        ),
        Figure(name="mean solve rate", value=sum(rates) / len(rates) if rates else 0.0),
        Figure(name=f"policy pass@{policy.k}", value=_mean_pass_at_k(policy)),
    ]
    return CheckResult.from_figures(
        "useful", f"{inside} of {len(rates)} measured rows inside the band", figures
    )


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name=name, status="skipped", summary=why)  # type: ignore[arg-type]


def _item_text(pack: TaskPack, item: Item, reason: str) -> str:
    return f"row {pack.rows[item.row].row_id} ({item.kind}): {reason}"
