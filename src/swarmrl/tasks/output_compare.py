"""How a program's stdout is matched with a test's expected output: the rule of Codeforces' testlib checkers.

Whitespace is space, tab, CR and LF (testlib's blanks; CRLF output compares like LF). In `lines` mode the
non-blank lines must correspond one to one (testlib's lcmp), in `tokens` mode the output is one sequence of
tokens (wcmp). Tokens then compare exactly — integers ("1000000007") and words alike — except where the
expected token is a non-integer decimal ("0.333333", "2.5e-7"): there a printed decimal within the absolute
or relative tolerance passes (rcmp6 with 1e-6), and a printed integer must equal it exactly (a "0" for
"0.0000009" is integer arithmetic, not a rounding). Only plain ASCII decimals count as numbers: Python's
`1_000`, `inf`, `nan`, `0x10` or Unicode digits never equal a number, as no judge's reader accepts them.

APPS/TACO's grader also tries `np.allclose` on every line (which takes "1000000008" for "1000000007": rel 1e-9
is under allclose's 1e-5) and then sets of tokens (any order); both accept wrong answers, so neither is used.
Values compare as `Decimal`s: exact, no overflow to inf for "1e400", no float rounding of long integers.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from typing import Literal

_BLANKS = re.compile(r"[ \t\r]+")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Differences are rounded to 60 digits, far finer than any tolerance; an overflow gives Infinity, not an error.
_CONTEXT = Context(prec=60, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])


@dataclass(frozen=True)
class OutputRule:
    """`CodeRewardConfig.stdout_compare` and `stdout_float_tolerance`, as the judge applies them, and a task's
    own `float_tolerance` and `case_sensitive` (false: words compare ignoring letter case, "YES" for "yes")."""

    compare: Literal["lines", "tokens"] = "lines"
    float_tolerance: float = 1e-6
    case_sensitive: bool = True


def stdout_matches(actual: str, expected: str, rule: OutputRule) -> bool:
    """Whether `actual` is an accepted output where `expected` is the test's answer."""
    got, want = _lines(actual), _lines(expected)
    if rule.compare == "tokens":
        got, want = [list(itertools.chain(*got))], [list(itertools.chain(*want))]
    if len(got) != len(want):
        return False
    tolerance = Decimal(repr(rule.float_tolerance))
    return all(
        len(got_line) == len(want_line)
        and all(
            token_matches(g, w, tolerance, rule.case_sensitive)
            for g, w in zip(got_line, want_line, strict=True)
        )
        for got_line, want_line in zip(got, want, strict=True)
    )


def token_matches(got: str, want: str, tolerance: Decimal, case_sensitive: bool = True) -> bool:
    if got == want or (not case_sensitive and got.casefold() == want.casefold()):
        return True
    if _INTEGER.fullmatch(want) or not _DECIMAL.fullmatch(want) or not _DECIMAL.fullmatch(got):
        return False
    got_value, want_value = _exact(got), _exact(want)
    if got_value is None or want_value is None:
        return False
    if _INTEGER.fullmatch(got):
        return got_value == want_value
    difference = _CONTEXT.abs(_CONTEXT.subtract(got_value, want_value))
    return difference.is_finite() and (
        difference <= tolerance or difference <= _CONTEXT.multiply(tolerance, abs(want_value))
    )


def _exact(token: str) -> Decimal | None:
    try:
        return Decimal(token)
    except ArithmeticError:  # an exponent beyond what Decimal represents
        return None


def _lines(text: str) -> list[list[str]]:
    tokens = (_BLANKS.split(line.strip(" \t\r")) for line in text.split("\n"))
    return [line for line in tokens if line != [""]]
