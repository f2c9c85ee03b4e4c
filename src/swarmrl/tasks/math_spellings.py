"""Spellings of a number that math-verify misreads, made plain before it reads a gold answer or a completion.

- Scientific notation ("1e-07", "2.5E+5", a JSON float's own repr) is the number it writes, `1\\times10^{-7}`:
  read as LaTeX, the `e` was Euler's number, so a gold of 1e-07 failed its own answer and matched
  `\\boxed{e - 7}`.
- `\\fbox{...}` is a box like `\\boxed{...}`.
- Unicode vulgar fractions ("½", "3¼") are `\\frac{1}{2}` (a mixed number after digits), the Unicode minus
  sign and its full-width forms ("−3") are "-".
- A box holding a number with a trailing dot (`\\boxed{42.}`) holds the number.

`last_box` is the content of the final `\\boxed{}`: a completion whose final box is empty or unreadable has
given no answer, and a number elsewhere in its prose is not taken instead.
"""

from __future__ import annotations

import re
import unicodedata

_SCIENTIFIC = re.compile(r"(?<![\w.\\])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")
_VULGAR = "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒"
_VULGAR_FRACTION = re.compile(f"(\\d*)([{_VULGAR}])")
_MINUS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})
_FBOX = re.compile(r"\\fbox\s*\{")
_BOX = re.compile(r"\\boxed\s*\{")
_TRAILING_DOT = re.compile(r"(\\boxed\s*\{\s*-?\d+)\.(\s*\})")


def plain_spellings(text: str) -> str:
    """`text` with the spellings above made plain."""
    text = text.translate(_MINUS)
    text = _FBOX.sub(r"\\boxed{", text)
    text = _VULGAR_FRACTION.sub(_fraction, text)
    text = _TRAILING_DOT.sub(r"\1\2", text)
    return _SCIENTIFIC.sub(_power_of_ten, text)


def is_scientific(text: str) -> bool:
    """Whether `text` is one number in scientific notation ("1e-07")."""
    return _SCIENTIFIC.fullmatch(text.strip().lstrip("+-")) is not None


def _power_of_ten(match: re.Match[str]) -> str:
    mantissa, exponent = match.group(1), int(match.group(2))
    return f"{mantissa.rstrip('.') or '0'}\\times10^{{{exponent}}}"


def _fraction(match: re.Match[str]) -> str:
    numerator, denominator = unicodedata.normalize("NFKC", match.group(2)).split("\u2044")
    return f"{match.group(1)}\\frac{{{numerator}}}{{{denominator}}}"


def last_box(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced), "" for an unclosed one; None without boxes."""
    starts = [match.end() for match in _BOX.finditer(text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[start:index]
    return ""
