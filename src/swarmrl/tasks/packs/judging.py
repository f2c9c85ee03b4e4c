"""Scoring completions of a pack's rows: the pack's verifier in the code sandbox, or its code tests by the
trusted code judge. Nothing a pack contains runs in this process.

A reward-function verifier is loaded as the "solution" of one sandbox session per pass (`sandbox.SandboxSession`:
no network, no host paths, its own wall-clock, CPU, memory and process limits) and called in batches the way
TRL calls reward functions: `f(prompts=[...], completions=[...], **columns)`. What comes back is decoded plain
data, and this side decides what it means: a reply counts only as a list of exactly as many scores as
completions sent, each None or a finite number (a bool counts as 0 or 1) in [0, 1] (NaN is None, as in TRL); anything else fails those
completions. The verifier never learns which completion is a reference or a cheat, and which row a score belongs
to is this side's bookkeeping, not the verifier's word.

`judge_twice` runs two independent passes, the second in another order (so other batches): a verifier whose
verdicts depend on time, chance, batch neighbours or state it kept is caught by comparing them.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from swarmrl.configs.task_packs import VerifierBudgetConfig
from swarmrl.configs.tasks import AnswerExtractionConfig, CodeRewardConfig
from swarmrl.tasks.code_judge import judge
from swarmrl.tasks.extraction import answer_region, last_python_block
from swarmrl.tasks.output_compare import OutputRule
from swarmrl.tasks.packs.manifest import RewardFunctionVerifier
from swarmrl.tasks.packs.pack import TaskPack
from swarmrl.tasks.reward_functions import trl_arguments
from swarmrl.tasks.sandbox import SandboxLimits, SandboxPlan, SandboxSession, SessionBroken


@dataclass(frozen=True)
class Item:
    """One completion of one row to score; `kind` ('reference', a cheat's name) stays on this side."""

    row: int
    completion: str
    kind: str


@dataclass(frozen=True)
class Failure:
    """An item the verifier did not score: it raised, answered out of form, or its session ended first."""

    reason: str


Outcome = float | None | Failure
_NOT_JUDGED = Failure("not judged")


@dataclass
class PassResult:
    outcomes: list[Outcome]  # by item index
    seconds: float = 0.0
    slowest_call_seconds: float = 0.0
    slowest_call_items: int = 0
    broken: str | None = None  # why the session ended before every item was scored
    calls: int = 0

    @classmethod
    def unjudged(cls, count: int, reason: str) -> PassResult:
        return cls([Failure(reason)] * count, broken=reason)

    @property
    def failures(self) -> list[tuple[int, Failure]]:
        return [
            (index, outcome) for index, outcome in enumerate(self.outcomes) if isinstance(outcome, Failure)
        ]


class Judge(Protocol):
    def run_pass(self, items: Sequence[Item], order: Sequence[int], deadline: float) -> PassResult: ...


@dataclass
class RewardFunctionJudge:
    """The pack's verifier.py, in one sandbox session per pass."""

    pack: TaskPack
    budget: VerifierBudgetConfig
    plan: SandboxPlan

    def limits(self, items: int, remaining: float) -> SandboxLimits:
        budget = self.budget
        wall = min(budget.startup_seconds + items * budget.ms_per_item / 1000, budget.pass_seconds, remaining)
        return SandboxLimits(
            wall_seconds=wall,
            cpu_seconds=budget.cpu_seconds,
            memory_bytes=budget.memory_mb << 20,
            max_processes=budget.max_processes,
            max_output_bytes=budget.batch_bytes,
            max_file_bytes=1 << 20,
            tmpfs_bytes=budget.tmpfs_mb << 20,
        )

    def run_pass(self, items: Sequence[Item], order: Sequence[int], deadline: float) -> PassResult:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return PassResult.unjudged(len(items), "over the admission time budget")
        result = PassResult([_NOT_JUDGED] * len(items))
        started = time.monotonic()
        assert self.pack.verifier_source is not None
        limits = self.limits(len(order), remaining)
        with SandboxSession(self.plan, limits, self.pack.verifier_source) as session:
            self._score_batches(session, items, order, result, started)
        result.seconds = time.monotonic() - started
        ended = Failure(f"the session ended first: {result.broken}")
        result.outcomes = [ended if outcome is _NOT_JUDGED else outcome for outcome in result.outcomes]
        return result

    def _score_batches(
        self,
        session: SandboxSession,
        items: Sequence[Item],
        order: Sequence[int],
        result: PassResult,
        started: float,
    ) -> None:
        """Every batch in turn, each due by the pace of `ms_per_item` from the session's start (and never after
        the session's own end): a verifier that hangs or crawls ends the pass at the call where it falls
        behind, not at the end of the pass's budget."""
        pace = self.budget.ms_per_item / 1000
        session_end, done = session.deadline, 0
        for batch in self._batches(items, order):
            due = started + self.budget.startup_seconds + (done + len(batch)) * pace
            session.deadline = min(session_end, due)
            try:
                self._call(session, items, batch, result)
            except SessionBroken as exc:
                behind = str(exc).startswith("timed out") and due < session_end
                result.broken = (
                    f"fell behind {self.budget.ms_per_item:g} ms per completion ({done} of {len(order)} scored "
                    f"in {time.monotonic() - started:.1f} s)"
                    if behind
                    else str(exc)[:300]
                )
                return
            done += len(batch)

    def _batches(self, items: Sequence[Item], order: Sequence[int]) -> list[list[int]]:
        batches: list[list[int]] = [[]]
        size = 0
        for index in order:
            item_bytes = self._encoded_size(items[index])
            if batches[-1] and (
                len(batches[-1]) == self.budget.batch_items or size + item_bytes > self.budget.batch_bytes
            ):
                batches.append([])
                size = 0
            batches[-1].append(index)
            size += item_bytes
        return [batch for batch in batches if batch]

    def _encoded_size(self, item: Item) -> int:
        task = self.pack.rows[item.row].task
        prompt = task.messages if task.messages is not None else task.prompt
        return len(json.dumps([prompt, item.completion, task.verification_info]))

    def _call(
        self, session: SandboxSession, items: Sequence[Item], batch: list[int], result: PassResult
    ) -> None:
        tasks = [self.pack.rows[items[index].row].task for index in batch]
        arguments = trl_arguments(tasks, [items[index].completion for index in batch], [()] * len(batch))
        # A pack's verdict may depend on neither a tokenizer nor the run's schedule (and the sandbox takes plain
        # data only): TRL's completion_ids and trainer_state are not handed over.
        del arguments["completion_ids"], arguments["trainer_state"]
        started = time.monotonic()
        verifier = self.pack.manifest.verifier
        assert isinstance(verifier, RewardFunctionVerifier)  # the judge of reward-function packs only
        reply = session.call(verifier.function, (), arguments)
        took = time.monotonic() - started
        result.calls += 1
        if took > result.slowest_call_seconds:
            result.slowest_call_seconds, result.slowest_call_items = took, len(batch)
        for index, outcome in zip(batch, reply_scores(reply, len(batch)), strict=True):
            result.outcomes[index] = outcome


def reply_scores(reply: tuple, count: int) -> list[Outcome]:
    """What a verifier's reply to a call scoring `count` completions says about each of them."""
    if reply[0] == "raised":
        return [Failure(f"raised {reply[1]}: {reply[2][:200]}")] * count
    value = reply[1]
    if type(value) not in (list, tuple):
        return [Failure(f"returned a {type(value).__name__}, not a list of {count} scores")] * count
    if len(value) != count:
        return [Failure(f"returned {len(value)} scores for {count} completions")] * count
    return [score_of(item) for item in value]


def score_of(value: Any) -> Outcome:
    if value is None:
        return None
    if type(value) not in (bool, int, float):
        return Failure(f"returned {type(value).__name__} {str(value)[:40]!r}, not a number or None")
    if isinstance(value, float) and math.isnan(value):
        return None
    if not 0 <= value <= 1:
        return Failure(f"returned {value!r}, outside [0, 1]")
    return float(value)


@dataclass
class CodeTestsJudge:
    """A code_tests pack: each completion's last python block against its row's tests, by the trusted judge,
    one sandbox session per completion."""

    pack: TaskPack
    code: CodeRewardConfig
    extraction: AnswerExtractionConfig
    plan: SandboxPlan
    rule: OutputRule = field(init=False)

    def __post_init__(self) -> None:
        self.rule = OutputRule(self.code.stdout_compare, self.code.stdout_float_tolerance)

    def run_pass(self, items: Sequence[Item], order: Sequence[int], deadline: float) -> PassResult:
        started = time.monotonic()
        result = PassResult([_NOT_JUDGED] * len(items))
        with ThreadPoolExecutor(self.code.num_workers) as pool:
            for index, outcome in zip(
                order, pool.map(lambda i: self._score(items[i], deadline), order), strict=True
            ):
                result.outcomes[index] = outcome
        result.seconds = time.monotonic() - started
        result.calls = len(order)
        return result

    def _score(self, item: Item, deadline: float) -> Outcome:
        region = answer_region(item.completion, self.extraction)
        code = last_python_block(region) if region is not None else None
        if code is None:
            return 0.0
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Failure("over the admission time budget")
        limits = SandboxLimits.from_config(self.code)
        if remaining < limits.wall_seconds:
            return Failure("over the admission time budget")
        tests = self.pack.rows[item.row].tests
        assert tests is not None
        return 1.0 if judge(tests, code, self.plan, limits, self.rule).all_passed else 0.0


def judge_twice(
    judge_: Judge, items: Sequence[Item], seed: str, deadline: float
) -> tuple[PassResult, PassResult]:
    """Two independent passes over `items`, at once: in order, and in a seeded shuffle."""
    order = list(range(len(items)))
    shuffled = order[:]
    random.Random(seed).shuffle(shuffled)
    with ThreadPoolExecutor(2) as pool:
        passes = list(pool.map(lambda o: judge_.run_pass(items, o, deadline), (order, shuffled)))
    return passes[0], passes[1]


def disagreements(first: PassResult, second: PassResult) -> list[int]:
    """Items both passes scored, differently."""
    return [
        index
        for index, (a, b) in enumerate(zip(first.outcomes, second.outcomes, strict=True))
        if not isinstance(a, Failure) and not isinstance(b, Failure) and a != b
    ]


def merged(first: PassResult, second: PassResult) -> list[Outcome]:
    """One outcome per item: the score both passes agree on, else the first failure or disagreement."""
    outcomes: list[Outcome] = []
    for a, b in zip(first.outcomes, second.outcomes, strict=True):
        if isinstance(a, Failure):
            outcomes.append(a)
        elif isinstance(b, Failure):
            outcomes.append(b)
        else:
            outcomes.append(a if a == b else Failure(f"judged {a} then {b}"))
    return outcomes
