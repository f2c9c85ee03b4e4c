"""Function results against JSON expected values (issue 58): types kept, floats within tolerance, rich values
read for what they stand for, and the trusted side's ledger of checks."""

import collections
import datetime
import decimal
import fractions

import numpy as np
import pytest

from swarmrl.tasks.check_ledger import Ledger
from swarmrl.tasks.result_compare import result_mismatch
from swarmrl.tasks.solution_proxy import bring_to

MATCH = [
    ("[1, 2, 3]", "[1, 2, 3]"),
    ([1, 2], [1, 2]),
    ((1, 2), [1, 2]),
    ([(1, 2), (3, 4)], [[1, 2], [3, 4]]),
    (collections.namedtuple("P", "x y")(1, 2), [1, 2]),
    (0.1 + 0.2, 0.3),
    (2, 2.0),
    (3.0, 3),
    (True, 1),
    (fractions.Fraction(1, 2), 0.5),
    (decimal.Decimal("2.5"), 2.5),
    (collections.Counter("aab"), {"a": 2, "b": 1}),
    (collections.deque([1, 2]), [1, 2]),
    (np.array([[1, 2], [3, 4]]), [[1, 2], [3, 4]]),
    (iter([1, 2]), [1, 2]),
    (None, None),
    ({"k": [1.0000001]}, {"k": [1.0]}),
]
MISMATCH = [
    ([1, 2, 3], "[1, 2, 3]"),  # a string stays a string: never JSON-decoded
    ("[1, 2, 3]", [1, 2, 3]),
    (3, [3]),  # never the single element of a list
    ([3], 3),
    ([[1, 2]], [1, 2]),
    (0.3001, 0.3),
    (3.0000001, 3),  # an integer expected value is exact
    ("YES", "yes"),
    (None, 0),
    (0, None),
    ({1: "a"}, {"1": "a"}),
    ([1, 2], [1, 2, 3]),
    (float("nan"), 1.0),
]


@pytest.mark.parametrize(("result", "expected"), MATCH)
def test_results_the_harness_accepts(result, expected):
    assert result_mismatch(result, expected, 1e-6) is None


@pytest.mark.parametrize(("result", "expected"), MISMATCH)
def test_results_the_harness_refuses(result, expected):
    assert result_mismatch(result, expected, 1e-6) == "wrong result"


def test_task_settings_tolerance_and_letter_case():
    assert result_mismatch(1.4142, 1.41421356, 1e-4) is None
    assert result_mismatch(1.41, 1.41421356, 1e-4) == "wrong result"
    assert result_mismatch("YES", "yes", 1e-6, case_sensitive=False) is None
    assert result_mismatch(["No"], ["NO"], 1e-6, case_sensitive=False) is None


@pytest.mark.parametrize(
    "result", [datetime.date(2024, 1, 1), [datetime.timedelta(1)], b"abc", {"k": 1j}], ids=str
)
def test_results_no_json_value_can_mean_are_refused_by_name(result):
    assert "which no JSON expected value can equal" in result_mismatch(result, "2024-01-01", 1e-6)


def test_ledger_counts_checks_and_what_reached_the_solution():
    ledger = Ledger()
    ledger.check(True)
    assert ledger.refusal() == "no check of the task's tests read anything the solution returned or raised"
    ledger.returned_calls += 1
    ledger.check(1 == 1)
    assert (ledger.passed, ledger.reaching, ledger.refusal()) == (2, 1, None)
    with pytest.raises(AssertionError, match="off by one"):
        ledger.check(False, lambda: "off by one")
    assert ledger.failed == 1 and ledger.refusal() == "a check failed: assertion failed: off by one"
    assert Ledger().refusal().startswith("the task's tests ran no check")


def test_arguments_changed_in_place_are_brought_to_their_new_state():
    grid = [[0, 0], [0, 0]]
    row = grid[0]
    bring_to(grid, [[1, 0], [0, 0]])
    assert grid == [[1, 0], [0, 0]] and row is grid[0] and row == [1, 0]
    lst = [1, 2, 3]
    bring_to(lst, [])
    assert lst == []
    table = {"a": [1], "b": 2}
    inner = table["a"]
    bring_to(table, {"a": [1, 2], "c": 3})
    assert table == {"a": [1, 2], "c": 3} and inner is table["a"]
    seen = {1}
    bring_to(seen, {2, 3})
    assert seen == {2, 3}
