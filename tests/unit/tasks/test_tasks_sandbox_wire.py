import collections
import datetime
import decimal
import fractions
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmrl.tasks.sandbox_wire import HEADER_BYTES, WireError, decode, encode, frame_length


def round_trip(value):
    frame = encode(value)
    assert frame_length(frame[:HEADER_BYTES]) == len(frame) - HEADER_BYTES
    return decode(frame[HEADER_BYTES:])


def same(a, b) -> bool:
    """Equal with exact types all the way down (and nan equal to nan, -0.0 distinct from 0.0)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)
    if type(a) is complex:
        return same(a.real, b.real) and same(a.imag, b.imag)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:  # decoding keeps the insertion order
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    return a == b


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.binary(max_size=30)
    | st.complex_numbers(allow_nan=True, allow_infinity=True)
)
# nan is never equal to itself, so set members and dict keys that hold one cannot be compared after a trip.
hashable_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.binary(max_size=30)
)
hashables = st.recursive(
    hashable_scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(hashables, inner, max_size=3)
        | st.sets(hashables, max_size=3)
        | st.frozensets(hashables, max_size=3)
    ),
    max_leaves=20,
)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")  # the recursive strategy's own repr
@settings(max_examples=300, deadline=None)
@given(values)
def test_every_plain_value_round_trips_with_exact_types(value):
    assert same(round_trip(value), value)


def test_edge_values():
    for value in (float("nan"), -0.0, float("-inf"), "\ud800", b"", (), frozenset(), {(1, 2): {3}}, 2**20000):
        assert same(round_trip(value), value)


def test_rich_values_arrive_as_themselves():
    point = collections.namedtuple("Point", "x y")
    for value in (
        point(1, 2),
        collections.Counter("aab"),
        collections.OrderedDict(b=1, a=2),
        collections.defaultdict(list, a=[1]),
        collections.deque([1, 2], maxlen=3),
        fractions.Fraction(1, 3),
        decimal.Decimal("1.50"),
        datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        datetime.date(2020, 1, 2),
        datetime.time(1, 2, 3),
        datetime.timedelta(days=-1, seconds=5),
    ):
        back = round_trip(value)
        assert type(back).__name__ == type(value).__name__ and back == value and repr(back) == repr(value)
    assert round_trip(point(1, 2)).y == 2
    assert round_trip(collections.defaultdict(list))["new"] == []
    array = round_trip(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert array.dtype == np.int32 and array.shape == (2, 3) and array.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert same(round_trip((np.float32(1.5), np.int64(3), np.bool_(True), np.str_("s"))), (1.5, 3, True, "s"))


def test_without_rich_values_subclasses_and_numpy_become_their_plain_base():
    point = collections.namedtuple("Point", "x y")

    def plain(value):
        return decode(encode(value, rich=False)[HEADER_BYTES:])

    assert same(plain(collections.Counter("aab")), {"a": 2, "b": 1})
    assert same(plain(point(1, 2)), (1, 2))
    assert same(plain(np.arange(4).reshape(2, 2)), [[0, 1], [2, 3]])

    class LyingInt(int):
        def __eq__(self, other):
            return True

        def __int__(self):
            return 99

    assert same(round_trip(LyingInt(5)), 5)


@pytest.mark.parametrize(
    "body",
    [
        b'["nt", "P", ["x"], 1, 2]',
        b'["nt", "P", ["class"], 1]',
        b'["nt", "P", ["_x"], 1]',
        b'["Q", 1, 0]',
        b'["Q", 1.5, 2]',
        b'["D", "one"]',
        b'["dt", "not a date"]',
        b'["td", 1, 2]',
        b'["dd", "eval"]',
        b'["dq", -1]',
        b'["nd", "|O8", [1], 1]',
        b'["nd", "<i8", [2], 1]',
        b'["h", 3]',
    ],
)
def test_malformed_rich_values_and_references_in_replies_are_refused(body):
    with pytest.raises(WireError):
        decode(body)


@pytest.mark.parametrize(
    "value",
    [
        object(),
        lambda: 1,
        iter([]),
        type,
        np.array([object()], dtype=object),
        Ellipsis,
        collections.defaultdict(lambda: 0),
        datetime.datetime(2020, 1, 1, tzinfo=datetime.tzinfo()),
    ],
)
def test_values_that_are_not_plain_data_are_refused(value):
    with pytest.raises(WireError):
        encode(value)


def test_cycles_and_deep_nesting_are_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises(WireError):
        encode(loop)
    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(WireError):
        encode(deep)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{}",
        b'{"__class__": "int"}',
        b"[1, 2]",
        b"[]",
        b'["x", 1]',
        b'["b", "abc"]',
        b'["b", "zz"]',
        b'["c", 1, 2]',
        b'["i", "123"]',
        b'["i", "0x"]',
        b'["s", ["l"]]',
        b'["d", ["l"], 1]',
        b'["d", 1]',
        b"[" * 100_000,
        b'["l",' * 150 + b"1" + b"]" * 150,
        b"1" * 5000,
        b"\xff\xfe",
        b"nan",
        b'"unterminated',
        b'["l", 1] trailing',
    ],
)
def test_malformed_bodies_are_refused(body):
    with pytest.raises(WireError):
        decode(body)


def test_value_count_is_capped():
    body = b'["l"' + b",0" * 1000 + b"]"
    assert decode(body, max_values=1001) == [0] * 1000
    with pytest.raises(WireError, match="too many values"):
        decode(body, max_values=1000)
