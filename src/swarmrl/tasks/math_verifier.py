"""Math reward: math-verify extracts the answer from the completion's answer region and compares it with the
ground truth(s).

Only where the answer is (after the think-end tag, inside answer tags) is ours (`extraction.answer_text`);
which expression in that text is the answer, and what it equals, is math-verify's: its LaTeX and plain
expression extractors with \\boxed{} first, the same configuration its own test suite uses. A hand-written
pre-extraction (last box, an "Answer:" line, the last line) lost comma decimals, display math over several
lines, relations, matrices and sets of several boxes, and matched a single combined box that math-verify
rejects; tests/unit/tasks/test_tasks_math_verify_suite.py holds the reward to math-verify's own verdict on
every case of its published suite.

math-verify guards `parse`/`verify` with `signal.alarm`, which only works on the main thread of the main
interpreter and silently misbehaves elsewhere. We switch those timeouts off (`parsing_timeout=None`,
`timeout_seconds=None`) and bound each call from outside instead: it runs in a `WallClockPool` worker that is
SIGKILLed and replaced when it misses the deadline. So any thread or process may call `MathVerifier.score`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import Any

from swarmrl.configs.tasks import AnswerExtractionConfig, MathRewardConfig
from swarmrl.tasks.errors import TaskError, VerifierCrash, VerifierTimeout
from swarmrl.tasks.extraction import accepts_unclosed_think, answer_text
from swarmrl.tasks.math_spellings import last_box, plain_spellings
from swarmrl.tasks.process_pool import WallClockPool
from swarmrl.tasks.task import Task

log = logging.getLogger(__name__)

_MATH_DELIMITERS = ("$", "\\(", "\\[", "\\boxed")
# A bare number as datasets write it ("7,425,000", "1 000", "1000,99", "12.5%"): math-verify's own number
# reader takes it as written, where inside $...$ LaTeX would read "1,22" as the set {1, 22}.
_PLAIN_NUMBER = re.compile(r"-?(?:\d{1,3}(?:[ ,]\d{3})+|\d+)?(?:[.,]\d+)?\s*%?")
# Money as MATH writes it ("\$18.90", "-\$5"): the escaped dollar is a currency sign, not a math delimiter.
_ESCAPED_DOLLAR = re.compile(r"\\\$")
# Money as plain-text datasets write it ("$18.90", "$1,000"): one unpaired dollar before a number.
_BARE_MONEY = re.compile(r"(-?)\$\s*(?=[0-9.])")
# Thousands grouped by a LaTeX space ("1\,000", "10\;000", "1~000"), which math-verify reads as a product.
_SPACED_THOUSANDS = re.compile(r"(?<=\d)(?:\\[,;: ]|~)(?=\d{3}(?!\d))")
# A number then plain words ("18.90 dollars", "12 apples"): in $...$ LaTeX reads the words as a product.
# Words that change the number ("5 million", "12 percent") are not units and stay.
_WORD_UNITS = re.compile(
    r"(-?[\d.,]*\d)(?:\s+(?!(?:hundred|thousand|million|billion|trillion|dozen|percent)\b)[A-Za-z]{2,}\.?)+",
    re.IGNORECASE,
)
# A lettered choice with its value ("\\textbf{(B)}\\ 12", "(C) 3"), as AMC answers are written: either counts.
_CHOICE = re.compile(
    r"(?:\\(?:text|textbf|mathrm)\{\s*\(([A-E])\)\s*\}|\(([A-E])\))(?:\s|~|\\[ ,;:!])*([^\s].*)", re.DOTALL
)
# A percentage ("12.5\\%", "40%"): math-verify reads it as the value 0.125, MATH's graders as the number 12.5.
_PERCENT = re.compile(r"(-?[\d.,]*\d)\s*\\?%")


def gold_texts(truth: str) -> list[str]:
    """The readings of a ground truth that a completion may match, each as math-verify should read it: the
    truth itself; for a lettered choice with its value ("\\textbf{(B)}\\ 12") the letter and the value too;
    for a percentage ("12.5\\%") the number of percent too (math-verify alone takes 10 for 10\\% but not
    12.5 for 12.5\\%)."""
    stripped = truth.strip()
    readings = [stripped]
    choice = _CHOICE.fullmatch(stripped)
    if choice is not None:
        readings = [choice.group(1) or choice.group(2), choice.group(3), stripped]
    percent = _PERCENT.fullmatch(stripped)
    if percent is not None:
        readings.append(percent.group(1))
    return [gold_text(reading) for reading in readings]


def completion_text(answer: str) -> str:
    """The answer region with the dataset spellings math-verify misreads made plain, as in gold answers: an
    escaped dollar is a currency sign ("The total is \\$1.17."), never a delimiter; "1\\,000" is a thousand,
    not the product 1*0 that would match a gold 0; and `math_spellings` (scientific notation, `\\fbox`,
    "½", "−3", `\\boxed{42.}`)."""
    return plain_spellings(_SPACED_THOUSANDS.sub("", _ESCAPED_DOLLAR.sub("", answer)))


def gold_text(truth: str) -> str:
    """One ground truth as math-verify should read it.

    First what the datasets mean is made explicit: an escaped dollar (MATH's money, "\\$18.90") or an unpaired
    one before a number ("$18.90") is a currency sign and goes; thousands grouped by a LaTeX space
    ("1\\,000") are joined; plain words after a number ("12 apples") go. Then, written with math delimiters
    (math-verify's test-suite style, "$x \\geq 5$", "\\boxed{1}, \\boxed{2}") or as a bare number, it is parsed
    as written, exactly as math-verify alone would. Bare LaTeX ("3\\sqrt{2}", "(1,3]", "x^2+1": the usual
    dataset answer; "5\\text{ cm}", "90^\\circ", "10\\%" included, which math-verify reads inside $...$) is
    wrapped in $...$: read without delimiters math-verify would find no LaTeX at all, only a stray number
    ("3" of "3\\sqrt{2}").
    """
    stripped = plain_spellings(_SPACED_THOUSANDS.sub("", _ESCAPED_DOLLAR.sub("", truth.strip())))
    if stripped.count("$") == 1:
        stripped = _BARE_MONEY.sub(r"\1", stripped, count=1)
    words = _WORD_UNITS.fullmatch(stripped)
    if words is not None:
        stripped = words.group(1)
    if any(d in stripped for d in _MATH_DELIMITERS) or (
        any(c.isdigit() for c in stripped) and _PLAIN_NUMBER.fullmatch(stripped)
    ):
        return stripped
    return f"${stripped}$"


def warm_math_verify() -> bool:
    """One small verification in a new worker: math-verify's imports and its LaTeX grammar load under the pool's
    start-up limit, so a call's own timeout never pays for them (a slow or loaded machine would score 0)."""
    return verify_math("\\boxed{1}", ["1"])


def verify_math(
    answer_text: str,
    ground_truths: Sequence[str],
    float_rounding: int = 6,
    boxed_match_priority: int = 0,
    multiple_answers: str = "all",
    accept_decimal_approximation: bool = False,
) -> bool:
    """True when math-verify finds in `answer_text` an answer equal to any ground truth; with
    `multiple_answers="any"` one member of a ground truth that is a set of answers suffices.

    An empty or unreadable final `\\boxed{}` is no answer (a number in the prose is not taken instead). A
    decimal that only approximates a gold whose decimal expansion does not end (0.8660254 for \\sqrt{3}/2,
    0.333 for 1/3, 3.14159 for \\pi) is not its answer unless the task accepts approximations: a policy
    rewarded for rounding learns to round. Runs in a pool worker: math-verify's signal-based timeouts are
    off, the pool's deadline bounds it.
    """
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    from sympy import FiniteSet

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    configs = [LatexExtractionConfig(boxed_match_priority=boxed_match_priority), ExprExtractionConfig()]
    text = completion_text(answer_text)
    box = last_box(text)
    if box is not None and not _readable(parse(f"\\boxed{{{box}}}", configs, parsing_timeout=None)):
        return False
    predictions = parse(text, extraction_config=configs, parsing_timeout=None)
    if not predictions:
        return False
    for truth in ground_truths:
        for reading in gold_texts(truth):
            gold = parse(reading, extraction_config=configs, parsing_timeout=None)
            if not gold:
                continue
            alternatives = [gold]
            if multiple_answers == "any" and isinstance(gold[0], FiniteSet):
                alternatives += [[member] for member in gold[0].args]
            for candidate in alternatives:
                if verify(candidate, predictions, float_rounding=float_rounding, timeout_seconds=None) and (
                    accept_decimal_approximation or not approximates(candidate[0], predictions[0])
                ):
                    return True
    return False


# A decimal this close to the exact gold (relative) carries every digit a double holds: it is not a rounding.
_DOUBLE_PRECISION = 1e-15


def _readable(parsed: list) -> bool:
    """math-verify read an expression (it answers [expression, text]; only [text] when it read none)."""
    return len(parsed) >= 2 and not isinstance(parsed[0], str)


def approximates(gold: Any, prediction: Any) -> bool:
    """Whether `prediction` is a decimal number standing for an exact gold number whose decimal expansion never
    ends (irrational, or a fraction whose denominator has a prime factor other than 2 and 5), rounded short of
    the gold's own double-precision value (0.0833333333333333 is 1/12 as a float prints it, and counts). An
    expression that holds a decimal (`10\\sqrt{10.5}/27`) is not an approximation of this kind."""
    from sympy import Expr, Float, Rational, factorint, nsimplify

    if not isinstance(gold, Expr) or not isinstance(prediction, Float):
        return False
    if not gold.is_number or gold.atoms(Float):
        return False
    try:
        value = nsimplify(gold.doit(), rational=False)  # golds are parsed unevaluated: 10*(1/100)
        if isinstance(value, Rational) and all(prime in (2, 5) for prime in factorint(value.q)):
            return False
        exact = float(abs(value.evalf(40)))
        difference = float(abs(prediction - value.evalf(40)))
    except (TypeError, ValueError, ArithmeticError):  # sympy cannot say: math-verify's verdict stands
        return False
    return not difference <= _DOUBLE_PRECISION * exact


MATH_FIELDS = frozenset(
    {"ground_truth", "ground_truths", "answer", "accept_decimal_approximation", "accept_unclosed_think"}
)


def math_ground_truths(task: Task) -> list[str]:
    """The task's ground truth(s): `ground_truth` (str, number or list) or `ground_truths`; TaskError naming
    a field the math reward does not know, or a setting that is not true/false."""
    info = task.verification_info
    unknown = sorted(set(info) - MATH_FIELDS)
    if unknown:
        raise TaskError(
            f"task {task.task_id}: field 'verification_info.{unknown[0]}' is not known to the math reward "
            "(docs/datasets.md lists the fields)"
        )
    for setting in ("accept_decimal_approximation", "accept_unclosed_think"):
        if not isinstance(info.get(setting, False), bool):
            raise TaskError(f"task {task.task_id}: {setting} must be true or false")
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
        text = answer_text(completion, self.extraction, accepts_unclosed_think(task.verification_info))
        if text is None or not text.strip():
            return 0.0
        try:
            ok = self._get_pool().call(
                verify_math,
                text,
                truths,
                self.config.float_rounding,
                self.config.boxed_match_priority,
                self.config.multiple_answers,
                task.verification_info.get("accept_decimal_approximation") is True,
                timeout=self.config.timeout_seconds,
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
                self._pool = WallClockPool(
                    self.config.num_workers, self.config.start_method, warm=warm_math_verify
                )
            return self._pool
