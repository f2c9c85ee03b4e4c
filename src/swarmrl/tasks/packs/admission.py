"""Admission of a task pack, the checks in order of cost, within one wall-clock budget.

1. loads, static: files, caps, manifest, signature, rows, references, the verifier's source (milliseconds);
2. leaking: answers in prompts, near-duplicates of held-out evals and admitted packs (no pack code runs);
3. the verifier's sandbox: a short probe session first (a verifier that hangs or crashes at once costs a few
   seconds), then two independent passes over the reference solutions and the generic cheats, which measure
   the rest of loads (every completion answered, in time, alike twice), solvable and hackable;
4. useful, from the run's policy when a measurement is given (phase 2: from leased rollouts).

`stop_early` (what a validator does) stops at the first failed check; `swarmrl tasks check` runs them all so
the author sees every problem at once. `salt` seeds the samples and the salted cheat: a validator keeps its own.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from swarmrl.configs.task_packs import AdmissionConfig
from swarmrl.configs.tasks import AnswerExtractionConfig, CodeRewardConfig
from swarmrl.tasks.packs import checks
from swarmrl.tasks.packs.cheats import borrowed_references, cheats_for
from swarmrl.tasks.packs.checks import PolicyMeasurement, VerifierRun
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.judging import (
    CodeTestsJudge,
    Item,
    Judge,
    PassResult,
    RewardFunctionJudge,
    disagreements,
    judge_twice,
    merged,
)
from swarmrl.tasks.packs.leaks import answer_in_prompt
from swarmrl.tasks.packs.near_duplicates import NearDuplicateIndex
from swarmrl.tasks.packs.pack import TaskPack, load_pack
from swarmrl.tasks.packs.report import AdmissionReport, CheckResult, verdict_of
from swarmrl.tasks.sandbox import sandbox_plan


@dataclass(frozen=True)
class AdmissionContext:
    """What a trusted node checks a pack against: its own limits and thresholds, sandbox and held-out prompts."""

    config: AdmissionConfig = field(default_factory=AdmissionConfig)
    code: CodeRewardConfig = field(default_factory=CodeRewardConfig)
    extraction: AnswerExtractionConfig = field(default_factory=AnswerExtractionConfig)
    held_out: NearDuplicateIndex | None = None
    band: tuple[float, float] = (0.1, 0.8)
    salt: int = 0
    policy: PolicyMeasurement | None = None
    stop_early: bool = False


def check_pack_at(path: str | Path, context: AdmissionContext) -> AdmissionReport:
    """The report of the pack at `path`; a pack that does not load is refused by `loads` with the reason."""
    started = time.monotonic()
    try:
        pack = load_pack(path, context.config.limits)
    except PackError as exc:
        checks_ = [checks.loads_refused(str(exc))]
        return AdmissionReport(
            verdict="refused", refused_by="loads", checks=checks_, seconds=time.monotonic() - started
        )
    return check_pack(pack, context, started)


def check_pack(pack: TaskPack, context: AdmissionContext, started: float | None = None) -> AdmissionReport:
    started = time.monotonic() if started is None else started
    deadline = started + context.config.seconds
    results: list[CheckResult] = []

    def done() -> AdmissionReport:
        verdict, refused_by = verdict_of(results)
        return AdmissionReport(
            pack=pack.manifest.label,
            author=pack.manifest.author,
            digest=pack.digest,
            rows=len(pack.rows),
            verdict=verdict,
            refused_by=refused_by,
            checks=results,
            seconds=time.monotonic() - started,
        )

    static = _timed(lambda: checks.loads_static(pack, context.config.limits))
    results.append(static)
    results.append(_timed(lambda: _leaking(pack, context)))
    if context.stop_early and any(result.status == "fail" for result in results):
        return done()
    verifier_checks = _verifier_checks(pack, context, static, deadline)
    results[0] = verifier_checks[0]
    results += verifier_checks[1:]
    results.append(checks.useful(context.policy, context.band, context.config.thresholds))
    return done()


def _leaking(pack: TaskPack, context: AdmissionContext) -> CheckResult:
    leaks = [answer_in_prompt(row, pack.manifest) for row in pack.rows]
    prompts = [row.prompt_text for row in pack.rows]
    index = context.held_out
    matches = index.matches(prompts) if index is not None else [None] * len(prompts)
    return checks.leaking(
        pack, leaks, matches, context.config.thresholds, len(index) if index is not None else 0
    )


def _verifier_checks(
    pack: TaskPack, context: AdmissionContext, static: CheckResult, deadline: float
) -> list[CheckResult]:
    """loads (static figures and the verifier's), solvable and hackable, from the sandbox passes."""
    started = time.monotonic()
    items, reference_rows = plan_items(pack, context)
    run = _run_verifier(pack, context, items, deadline)
    loads = checks.with_verifier(static, pack, run, context.config.verifier)
    loads.seconds = static.seconds + time.monotonic() - started
    if loads.status == "fail":
        why = "the verifier did not answer as it must (see loads)"
        return [loads, checks.skipped("solvable", why), checks.skipped("hackable", why)]
    thresholds = context.config.thresholds
    if pack.references:
        solvable = checks.solvable_by_references(pack, run, reference_rows, thresholds)
    else:
        solvable = checks.solvable_by_policy(context.policy, thresholds)
    return [loads, solvable, checks.hackable(run, thresholds)]


def plan_items(pack: TaskPack, context: AdmissionContext) -> tuple[list[Item], list[int]]:
    """The completions to score: every reference of the rows judged, then every cheat on a seeded sample of
    rows. Returns them with the rows whose references are judged."""
    config = context.config
    code = pack.manifest.verifier.kind == "code_tests"
    seed = f"{pack.digest}:{context.salt}"
    reference_rows = _sample(
        len(pack.rows), config.code_rows if code else len(pack.rows), f"{seed}/references"
    )
    cheat_rows = _sample(
        len(pack.rows), config.code_cheat_rows if code else config.cheat_rows, f"{seed}/cheats"
    )
    items = [
        Item(row, completion, "reference")
        for row in reference_rows
        for completion in pack.references.get(pack.rows[row].row_id, ())
    ]
    borrowed = borrowed_references(pack, cheat_rows, f"{seed}/borrowed")
    for row in cheat_rows:
        cheats = cheats_for(
            pack.rows[row], pack.manifest.task_type, context.salt, config.long_cheat_chars, borrowed.get(row)
        )
        items += [Item(row, cheat.completion, cheat.name) for cheat in cheats]
    return items, reference_rows


def _run_verifier(
    pack: TaskPack, context: AdmissionContext, items: list[Item], deadline: float
) -> VerifierRun:
    plan = sandbox_plan(context.code)
    judge: Judge
    passes: list[PassResult] = []
    if pack.manifest.verifier.kind == "code_tests":
        judge = CodeTestsJudge(pack, context.code, context.extraction, plan)
    else:
        judge = RewardFunctionJudge(pack, context.config.verifier, plan)
        probe = items[: context.config.verifier.probe_items]
        passes.append(judge.run_pass(probe, range(len(probe)), deadline))
        if passes[0].failures:
            result = passes[0]
            return VerifierRun(
                probe, result.outcomes, 0, result.slowest_call_seconds, result.slowest_call_items, 1
            )
    first, second = judge_twice(judge, items, f"{pack.digest}:{context.salt}/order", deadline)
    slowest = max((*passes, first, second), key=lambda result: result.slowest_call_seconds)
    return VerifierRun(
        items,
        merged(first, second),
        len(disagreements(first, second)),
        slowest.slowest_call_seconds,
        slowest.slowest_call_items,
        2,
    )


def _sample(count: int, size: int, seed: str) -> list[int]:
    return sorted(random.Random(seed).sample(range(count), min(size, count)))


def _timed(check) -> CheckResult:
    started = time.monotonic()
    result = check()
    result.seconds = time.monotonic() - started
    return result
