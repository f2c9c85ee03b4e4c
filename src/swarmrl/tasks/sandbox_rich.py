"""Rich values on the sandbox wire: the standard library's value types a solution returns and a test compares.

Standard library only, like `sandbox_wire`, which imports this file on first need on either side. Tagged forms:

    ["nt", typename, [fields], item...]   namedtuple (any tuple subclass with `_fields`)
    ["C", key, count...]  Counter          ["O", key, value...]  OrderedDict
    ["dd", factory, key, value...]  defaultdict (factory: a builtin type's name, or null)
    ["dq", maxlen, item...]  deque         ["Q", numerator, denominator]  Fraction
    ["D", "1.50"]  Decimal                 ["dt" | "da" | "tm", isoformat]  datetime / date / time
    ["td", days, seconds, microseconds]  timedelta
    ["nd", dtype, [shape], item...]  numpy array of a bool, int, uint, float or complex dtype

Each is rebuilt as the real type on the other side, so a test's `==`, attribute reads and numpy functions see
what the harness would. Values are read through the base types' own accessors (a subclass's overrides are not
called) and rebuilt from plain parts only: a namedtuple's names must be identifiers, a datetime's zone a fixed
offset, an array's dtype numeric. numpy scalars stay what they always were on the wire: Python scalars.
"""

import builtins
import sys

TAGS = frozenset({"nt", "C", "O", "dd", "dq", "Q", "D", "dt", "da", "tm", "td", "nd"})
_FACTORIES = ("list", "int", "set", "dict", "str", "float", "tuple", "frozenset", "bool", "bytes")
_NAMEDTUPLES: dict[
    tuple[str, tuple[str, ...]], type
] = {}  # (typename, fields) -> class, so that one result's values share one type
_MAX_NAMEDTUPLE_TYPES = 256


class RichError(ValueError):
    """A value of a rich type that has no plain form, or a tagged form that is malformed."""


def tagged(value, depth, tree):
    """The tagged form of a rich value (its items through `tree(item, depth)`), None when it is none of them."""
    if isinstance(value, tuple):
        return _namedtuple(value, depth, tree)
    collections = sys.modules.get("collections")
    if collections is not None:
        found = _collection(collections, value, depth, tree)
        if found is not None:
            return found
    fractions = sys.modules.get("fractions")
    if fractions is not None and isinstance(value, fractions.Fraction):
        parts = (fractions.Fraction.numerator.fget(value), fractions.Fraction.denominator.fget(value))
        if any(type(part) is not int for part in parts):
            raise RichError("a Fraction with parts that are not ints is not plain data")
        return ["Q", tree(parts[0], depth - 1), tree(parts[1], depth - 1)]
    decimal = sys.modules.get("decimal")
    if decimal is not None and isinstance(value, decimal.Decimal):
        return ["D", decimal.Decimal.__str__(value)]
    datetime = sys.modules.get("datetime")
    if datetime is not None:
        found = _moment(datetime, value)
        if found is not None:
            return found
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return _array(value, depth, tree)
    return None


def _namedtuple(value, depth, tree):
    kind = type(value)
    fields = getattr(kind, "_fields", None)
    if kind is tuple or type(fields) is not tuple or not all(type(name) is str for name in fields):
        return None
    items = list(tuple.__iter__(value))
    if len(items) != len(fields):
        return None
    return ["nt", str(kind.__name__), list(fields), *(tree(item, depth - 1) for item in items)]


def _collection(collections, value, depth, tree):
    if isinstance(value, dict):
        pairs = [part for pair in dict.items(value) for part in pair]
        if isinstance(value, collections.Counter):
            return ["C", *(tree(part, depth - 1) for part in pairs)]
        if isinstance(value, collections.OrderedDict):
            return ["O", *(tree(part, depth - 1) for part in pairs)]
        if isinstance(value, collections.defaultdict):
            factory = collections.defaultdict.default_factory.__get__(value)
            named = next((name for name in _FACTORIES if factory is getattr(builtins, name)), None)
            if factory is not None and named is None:
                raise RichError("a defaultdict whose factory is not a builtin type is not plain data")
            return ["dd", named, *(tree(part, depth - 1) for part in pairs)]
        return None
    if isinstance(value, collections.deque):
        maxlen = collections.deque.maxlen.__get__(value)
        return ["dq", maxlen, *(tree(item, depth - 1) for item in collections.deque.__iter__(value))]
    return None


def _moment(datetime, value):
    for tag, kind in (("dt", datetime.datetime), ("da", datetime.date), ("tm", datetime.time)):
        if isinstance(value, kind):
            zone = getattr(kind, "tzinfo", None)
            zone = zone.__get__(value) if zone is not None else None
            if zone is not None and type(zone) is not datetime.timezone:
                raise RichError(f"a {kind.__name__} in time zone {type(zone).__name__} is not plain data")
            return [tag, kind.isoformat(value)]
    if isinstance(value, datetime.timedelta):
        parts = (datetime.timedelta.days, datetime.timedelta.seconds, datetime.timedelta.microseconds)
        return ["td", *(part.__get__(value) for part in parts)]
    return None


def _numeric_dtype(text):
    """A numpy dtype string of a bool, int, uint, float or complex type ("<f8", "|b1"); no `re` in here,
    whose import would cost every sandbox start."""
    return (
        type(text) is str
        and 3 <= len(text) <= 4
        and text[0] in "<>|="
        and text[1] in "biufc"
        and text[2:].isdigit()
        and text[2:].isascii()
    )


def _array(value, depth, tree):
    dtype = value.dtype
    if dtype.kind not in "biufc" or not _numeric_dtype(dtype.str):
        raise RichError(f"a numpy array of dtype {dtype} is not plain data")
    flat = value.ravel().tolist()
    return ["nd", dtype.str, list(value.shape), *(tree(item, depth - 1) for item in flat)]


def build(tag, items, value_of):
    """The rich value of a tagged form; `value_of` decodes one nested wire node. RichError when malformed."""
    if tag == "nt":
        return _build_namedtuple(items, value_of)
    if tag in ("C", "O", "dd"):
        return _build_mapping(tag, items, value_of)
    if tag == "dq":
        import collections

        if not items or not (items[0] is None or (type(items[0]) is int and items[0] >= 0)):
            raise RichError("malformed deque")
        return collections.deque((value_of(item) for item in items[1:]), items[0])
    if tag == "Q":
        import fractions

        parts = [value_of(item) for item in items]
        if len(parts) != 2 or any(type(part) is not int for part in parts) or parts[1] <= 0:
            raise RichError("malformed Fraction")
        return fractions.Fraction(parts[0], parts[1])
    if tag == "D":
        return _build_decimal(items)
    if tag in ("dt", "da", "tm", "td"):
        return _build_moment(tag, items)
    return _build_array(items, value_of)


def _build_namedtuple(items, value_of):
    if len(items) < 2 or type(items[0]) is not str or type(items[1]) is not list:
        raise RichError("malformed namedtuple")
    name, fields = items[0], items[1]
    if not all(type(field) is str for field in fields) or len(items) - 2 != len(fields):
        raise RichError("malformed namedtuple")
    key = (name, tuple(fields))
    kind = _NAMEDTUPLES.get(key)
    if kind is None:
        import collections

        make = collections.namedtuple  # a class made at run time, which mypy's namedtuple() support refuses
        try:
            kind = make(name, fields)
        except (ValueError, TypeError) as exc:
            raise RichError(f"malformed namedtuple: {exc}") from None
        if len(_NAMEDTUPLES) < _MAX_NAMEDTUPLE_TYPES:
            _NAMEDTUPLES[key] = kind
    return kind(*(value_of(item) for item in items[2:]))


def _build_mapping(tag, items, value_of):
    import collections

    factory = None
    if tag == "dd":
        if not items or not (items[0] is None or items[0] in _FACTORIES):
            raise RichError("malformed defaultdict")
        factory = None if items[0] is None else getattr(builtins, items[0])
        items = items[1:]
    if len(items) % 2:
        raise RichError("a mapping payload must alternate keys and values")
    values = [value_of(item) for item in items]
    result: dict
    if tag == "C":
        result = collections.Counter()
    elif tag == "O":
        result = collections.OrderedDict()
    else:
        result = collections.defaultdict(factory)
    try:
        for index in range(0, len(values), 2):
            result[values[index]] = values[index + 1]
    except TypeError as exc:
        raise RichError(f"bad mapping key: {exc}") from None
    return result


def _build_decimal(items):
    import decimal

    if len(items) != 1 or type(items[0]) is not str or len(items[0]) > 5000:
        raise RichError("malformed Decimal")
    try:
        return decimal.Decimal(items[0])
    except decimal.InvalidOperation:
        raise RichError("malformed Decimal") from None


def _build_moment(tag, items):
    import datetime

    if tag == "td":
        if len(items) != 3 or any(type(part) is not int for part in items):
            raise RichError("malformed timedelta")
        try:
            return datetime.timedelta(days=items[0], seconds=items[1], microseconds=items[2])
        except OverflowError:
            raise RichError("malformed timedelta") from None
    if len(items) != 1 or type(items[0]) is not str or len(items[0]) > 64:
        raise RichError(f"malformed {tag}")
    kind: type[datetime.date | datetime.time] = {
        "dt": datetime.datetime,
        "da": datetime.date,
        "tm": datetime.time,
    }[tag]
    try:
        return kind.fromisoformat(items[0])
    except ValueError:
        raise RichError(f"malformed {kind.__name__}") from None


def _build_array(items, value_of):
    if len(items) < 2 or type(items[0]) is not str or not _numeric_dtype(items[0]):
        raise RichError("malformed numpy array")
    shape = items[1]
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape) or len(shape) > 32:
        raise RichError("malformed numpy array shape")
    size = 1
    for length in shape:
        size *= length
    if size != len(items) - 2:
        raise RichError("a numpy array's values do not fill its shape")
    try:
        import numpy
    except ImportError:
        raise RichError("the value is a numpy array, and numpy is not installed here") from None
    flat = [value_of(item) for item in items[2:]]
    try:
        return numpy.array(flat, dtype=numpy.dtype(items[0])).reshape(shape)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RichError(f"malformed numpy array: {exc}") from None
