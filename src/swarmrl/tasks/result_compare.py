"""A function's result against the expected value a dataset wrote in JSON, compared as the harness would.

Types are kept: a string result equals only a string (never JSON-decoded), a list only a list of the same length
(never its single element), None only None, a dict only a dict with the same keys. JSON has no tuples, so a
tuple (or a namedtuple) result compares as the list it is, at any depth, as LiveCodeBench's and APPS'
harnesses turn tuples into lists. Numbers compare by value, as Python's `==` does (True equals 1, 3.0 equals
3); where the expected value is a float, a result within the task's tolerance (absolute or relative) passes,
so `0.1 + 0.2` answers 0.3. Strings compare exactly, or case-insensitively when the task says so.

Rich results are read as the values they stand for: a Counter, OrderedDict or defaultdict as a dict, a deque
or a numpy array as a list, a Fraction or Decimal as its number, an iterator as the list of what it yielded.
A datetime, date, time, timedelta, bytes or complex result is refused by name: no JSON value means one.
"""

from __future__ import annotations

import collections
import datetime
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

_REFUSED = (datetime.date, datetime.time, datetime.timedelta, bytes, complex)


def result_mismatch(result: Any, expected: Any, tolerance: float, case_sensitive: bool = True) -> str | None:
    """None when `result` answers `expected`; otherwise why not (a refusal names the result's type)."""
    refused = _refused_type(result)
    if refused is not None:
        return f"the result holds a {refused}, which no JSON expected value can equal"
    if _matches(result, expected, tolerance, case_sensitive):
        return None
    return "wrong result"


def _refused_type(value: Any) -> str | None:
    if isinstance(value, _REFUSED):
        return type(value).__name__
    if isinstance(value, list | tuple | set | frozenset | collections.deque):
        return next((found for item in value if (found := _refused_type(item)) is not None), None)
    if isinstance(value, dict):
        return next((found for item in value.values() if (found := _refused_type(item)) is not None), None)
    return None


def _matches(result: Any, expected: Any, tolerance: float, case_sensitive: bool) -> bool:
    result = _plain(result)
    if expected is None:
        return result is None
    if isinstance(expected, bool | int | float):
        return _number_matches(result, expected, tolerance)
    if isinstance(expected, str):
        if type(result) is not str:
            return False
        return result == expected or (not case_sensitive and result.casefold() == expected.casefold())
    if isinstance(expected, list):
        return (
            isinstance(result, list)
            and len(result) == len(expected)
            and all(_matches(r, e, tolerance, case_sensitive) for r, e in zip(result, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(result, dict)
            and result.keys() == expected.keys()
            and all(_matches(result[key], expected[key], tolerance, case_sensitive) for key in expected)
        )
    return False


def _plain(value: Any) -> Any:
    """The JSON-shaped reading of a decoded result (see the module docstring)."""
    numpy_array = getattr(value, "tolist", None) if type(value).__module__ == "numpy" else None
    if numpy_array is not None:
        return numpy_array()
    if isinstance(value, tuple | collections.deque):
        return list(value)
    if isinstance(value, dict) and type(value) is not dict:
        return dict(value)
    if isinstance(value, Fraction | Decimal):
        return value
    if hasattr(value, "__next__") and type(value).__module__ == "builtins":
        return list(value)
    return value


def _number_matches(result: Any, expected: bool | int | float, tolerance: float) -> bool:
    if not isinstance(result, bool | int | float | Fraction | Decimal):
        return False
    if isinstance(expected, float) and not isinstance(expected, bool):
        return _close(result, expected, tolerance)
    return result == expected


def _close(result: Any, expected: float, tolerance: float) -> bool:
    if math.isinf(expected) or math.isnan(expected):
        return result == expected
    try:
        difference = abs(Fraction(result) - Fraction(expected))
    except (ValueError, OverflowError):  # a nan or an infinite result
        return False
    bound = Fraction(tolerance)
    return difference <= bound or difference <= bound * abs(Fraction(expected))
