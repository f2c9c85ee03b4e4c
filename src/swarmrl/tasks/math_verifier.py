"""Math reward: the extracted final answer checked against the ground truth(s) with math-verify.

math-verify guards `parse`/`verify` with `signal.alarm`, which only works on the main thread of the main
interpreter and silently misbehaves elsewhere. We switch those timeouts off (`parsing_timeout=None`,
`timeout_seconds=None`) and bound each call from outside instead: it runs in a `WallClockPool` worker that is
SIGKILLed and replaced when it misses the deadline. So any thread or process may call `MathVerifier.score`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from swarmrl.tasks.config import AnswerExtractionConfig, MathRewardConfig
from swarmrl.tasks.errors import TaskError, VerifierCrash, VerifierTimeout
from swarmrl.tasks.extraction import answer_region, final_math_answer
from swarmrl.tasks.process_pool import WallClockPool
from swarmrl.tasks.task import Task

log = logging.getLogger(__name__)


def verify_math(answer: str, ground_truths: Sequence[str], float_rounding: int = 6) -> bool:
    """True when `answer` equals any ground truth under math-verify (runs in a pool worker; no signals)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    # math-verify's latex extractor expects math delimiters; a bare answer like "x^2" is wrapped in $...$.
    predictions = parse(f"${answer}$", extraction_config=configs, parsing_timeout=None)
    if not predictions:
        predictions = parse(answer, extraction_config=configs, parsing_timeout=None)
    if not predictions:
        return False
    for truth in ground_truths:
        gold = parse(f"${truth}$", extraction_config=configs, parsing_timeout=None)
        if not gold:
            gold = parse(truth, extraction_config=configs, parsing_timeout=None)
        if gold and verify(gold, predictions, float_rounding=float_rounding, timeout_seconds=None):
            return True
    return False


def math_ground_truths(task: Task) -> list[str]:
    """The task's ground truth(s): `ground_truth` (str, number or list) or `ground_truths`."""
    info = task.verification_info
    raw: Any = info.get("ground_truth", info.get("ground_truths", info.get("answer")))
    if raw is None:
        raise TaskError(f"task {task.task_id}: verification_info has no ground_truth")
    truths = raw if isinstance(raw, list) else [raw]
    if not truths or not all(isinstance(t, str | int | float) and not isinstance(t, bool) for t in truths):
        raise TaskError(f"task {task.task_id}: ground_truth must be a string/number or a list of them")
    return [str(t) for t in truths]


class MathVerifier:
    """Scores math completions 1/0; thread-safe; one pool per verifier, started lazily."""

    task_type = "math"

    def __init__(
        self, config: MathRewardConfig | None = None, extraction: AnswerExtractionConfig | None = None
    ) -> None:
        self.config = config or MathRewardConfig()
        self.extraction = extraction or AnswerExtractionConfig()
        self._pool: WallClockPool | None = None
        self._lock = threading.Lock()

    def score(self, task: Task, completion: str) -> float:
        truths = math_ground_truths(task)
        region = answer_region(completion, self.extraction)
        if region is None:
            return 0.0
        answer = final_math_answer(region)
        if not answer:
            return 0.0
        try:
            ok = self._get_pool().call(
                verify_math, answer, truths, self.config.float_rounding, timeout=self.config.timeout_seconds
            )
        except VerifierTimeout:
            log.info("math-verify timed out on task %s; scoring 0", task.task_id)
            return 0.0
        except VerifierCrash as exc:
            # A crash inside math-verify/sympy on a hostile answer is the answer's fault: it is not verified.
            log.info("math-verify failed on task %s (%s); scoring 0", task.task_id, exc)
            return 0.0
        return 1.0 if ok else 0.0

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def _get_pool(self) -> WallClockPool:
        with self._lock:
            if self._pool is None:
                self._pool = WallClockPool(self.config.num_workers, self.config.start_method)
            return self._pool
