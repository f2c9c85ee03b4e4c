"""The one wire format between the trusted side and the code sandbox: plain Python values as tagged JSON.

Standard library only: the same file is imported by the trusted side (`swarmrl.tasks.sandbox_wire`) and, bound
read-only into the sandbox, by the sandbox's own bootstrap. Every message in either direction is one frame:
a 4-byte big-endian length, then UTF-8 JSON (ASCII-escaped) of one value in this grammar:

    null / true / false / JSON string / JSON integer / JSON float (NaN, Infinity, -Infinity included)
    ["l", item...]  list        ["t", item...]  tuple        ["s", item...]  set     ["f", item...]  frozenset
    ["d", key, value, key, value...]  dict (keys of any hashable type)
    ["b", "hex"]  bytes         ["c", real, imag]  complex    ["i", "-0x1f..."]  int too long for a JSON number

plus the standard library's rich values (namedtuple, Counter, OrderedDict, defaultdict, deque, Fraction, Decimal,
datetime, date, time, timedelta) and numpy arrays, tagged as `sandbox_rich` describes, and, in requests to the
sandbox only, ["h", id]: a reference to an object the sandbox holds (`Ref`); and, where a session names
record classes, objects of those classes sent by value as a graph (`sandbox_records`).

JSON objects, untagged arrays, unknown tags and malformed payloads are refused. `decode` builds fresh objects
of exactly these types (never a subclass, never anything that runs code on comparison), with caps on the frame
size, the nesting depth and the number of values. `encode` takes exact builtin types and the rich ones;
instances of other subclasses of builtin types (an int subclass, a solution's list subclass) are reduced to
the base type through the base type's own methods, and numpy scalars become Python scalars. Anything else
raises WireError: it is not plain data.
"""

import importlib
import sys

# CPython's JSON accelerator, used directly: `import json` pulls in `re`, some 7 ms of every sandbox start.
from _json import encode_basestring_ascii, make_encoder, make_scanner

MAX_DEPTH = 100
MAX_VALUES = 1_000_000
HEADER_BYTES = 4
# Ints whose decimal form stays under Python's default int<->str digit limit (4300) travel as JSON numbers.
_PLAIN_INT_BITS = 14_000
_PLAIN_INT_DIGITS = 4300
_HEX_DIGITS = frozenset("0123456789abcdef")
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_SEQUENCE_TAGS = {"l": list, "t": tuple, "s": set, "f": frozenset}
_TAG_OF: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "f"}


class WireError(ValueError):
    """A value that cannot be sent, or bytes that are not one well-formed value within the limits."""


class Ref:
    """An object the sandbox holds, named in a request by the id the sandbox gave it (never sent back)."""

    __slots__ = ("id",)

    def __init__(self, id):  # noqa: A002 — the handle's own name on both sides
        self.id = id

    def __repr__(self):
        return f"Ref({self.id})"


# sandbox_rich and sandbox_records, imported on first need (most frames use neither)
_SIBLINGS: dict = {}  # name -> module (`types` is not imported here: it is not loaded at a sandbox's start)


def _sibling(name):
    if name not in _SIBLINGS:
        package = __spec__.parent if __spec__ is not None else ""
        _SIBLINGS[name] = importlib.import_module(f"{package}.{name}" if package else name)
    return _SIBLINGS[name]


def _rich():
    return _sibling("sandbox_rich")


def encode(value, max_depth=MAX_DEPTH, rich=True, records=None):
    """One frame (header + body) holding `value`. With `rich` false, rich values are sent as their plain
    builtin base (a namedtuple as a tuple, a Counter as a dict, a numpy array as lists), as the original
    `call` form of the sandbox promises. `records`: the classes (names, or name -> class) whose objects are
    sent by value (`sandbox_records`)."""
    if records:
        module = _sibling("sandbox_records")
        try:
            tree = module.graph(value, records, lambda item, hook: _tree(item, max_depth, rich, hook))
        except module.RecordError as exc:
            raise WireError(str(exc)) from None
    else:
        tree = _tree(value, max_depth, rich)
    data = "".join(_ENCODER(tree, 0)).encode("ascii")
    return len(data).to_bytes(HEADER_BYTES, "big") + data


def decode(body, max_depth=MAX_DEPTH, max_values=MAX_VALUES, refs=False, records=None):
    """The value in a frame body (the bytes after the header); WireError for anything outside the grammar.
    `refs`: whether ["h", id] references may occur (requests to the sandbox), decoded as `Ref`. `records`:
    the class of each record class name (a callable; None: no records may occur)."""
    try:
        text = body.decode("ascii")
        tree, end = _SCANNER(text, 0)
    except StopIteration:
        raise WireError("not a wire value: no JSON value") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # JSONDecodeError, UnicodeDecodeError included
        raise WireError(f"not a wire value: {type(exc).__name__}: {str(exc)[:200]}") from None
    if end != len(text):
        raise WireError("not a wire value: data after the value")
    counter = [max_values, refs, None]
    if records is not None and type(tree) is list and len(tree) == 3 and tree[0] == "g":
        module = _sibling("sandbox_records")
        try:
            counter[2] = module.made(tree[1], records)
            module.filled(counter[2], tree[1], lambda node: _value(node, max_depth, counter))
        except module.RecordError as exc:
            raise WireError(str(exc)) from None
        tree = tree[2]
    return _value(tree, max_depth, counter)


def frame_length(header):
    """Body length announced by a 4-byte header."""
    if len(header) != HEADER_BYTES:
        raise WireError("truncated frame header")
    return int.from_bytes(header, "big")


def _constant(name):
    return _CONSTANTS[name]


def _plain_int(text):
    # Longer numbers must come as ["i", hex]; this keeps decoding independent of sys.set_int_max_str_digits.
    if len(text) > _PLAIN_INT_DIGITS:
        raise WireError("integer literal too long")
    return int(text)


def _refuse_object(pairs):
    raise WireError("JSON objects are not part of the wire format")


def _unencodable(value):
    raise WireError(f"a {type(value).__name__} is not plain data")


class _ScannerSettings:
    """What the C scanner reads off a json.JSONDecoder: strict strings, no objects, our numbers."""

    strict = True
    object_hook = None
    object_pairs_hook = staticmethod(_refuse_object)
    parse_float = float
    parse_int = staticmethod(_plain_int)
    parse_constant = staticmethod(_constant)


# Arguments as json.JSONEncoder passes them: no cycle markers (trees are acyclic and depth-capped), compact
# separators, ASCII strings, NaN and infinities written as NaN / Infinity.
_ENCODER = make_encoder(None, _unencodable, encode_basestring_ascii, None, ":", ",", False, False, True)
# typeshed types the context as a JSONDecoder; the scanner reads only the attributes above.
_SCANNER = make_scanner(_ScannerSettings())  # type: ignore[arg-type]


def _value(node, depth, counter):
    counter[0] -= 1
    if counter[0] < 0:
        raise WireError("too many values")
    kind = type(node)
    if node is None or kind in (bool, int, float, str):
        return node
    if kind is not list or not node or type(node[0]) is not str:
        raise WireError("compound values must be tagged arrays")
    if depth <= 0:
        raise WireError("value nests too deeply")
    tag, items = node[0], node[1:]
    if tag in _SEQUENCE_TAGS:
        values = [_value(item, depth - 1, counter) for item in items]
        try:
            return _SEQUENCE_TAGS[tag](values)
        except TypeError as exc:  # an unhashable member of a set
            raise WireError(f"bad set member: {exc}") from None
    if tag == "d":
        if len(items) % 2:
            raise WireError("dict payload must alternate keys and values")
        values = [_value(item, depth - 1, counter) for item in items]
        result = {}
        try:
            for index in range(0, len(values), 2):
                result[values[index]] = values[index + 1]
        except TypeError as exc:
            raise WireError(f"bad dict key: {exc}") from None
        return result
    payload = items[0] if len(items) == 1 and type(items[0]) is str else None
    if tag == "b" and payload is not None and len(payload) % 2 == 0 and set(payload) <= _HEX_DIGITS:
        return bytes.fromhex(payload)
    if tag == "c" and len(items) == 2 and all(type(part) is float for part in items):
        return complex(items[0], items[1])
    if tag == "i" and payload is not None:
        negative = payload.startswith("-")
        digits = payload[3:] if negative else payload[2:]
        if payload[negative : negative + 2] == "0x" and digits and set(digits) <= _HEX_DIGITS:
            return -int(digits, 16) if negative else int(digits, 16)
    if tag == "h" and counter[1] and len(items) == 1 and type(items[0]) is int and items[0] >= 0:
        return Ref(items[0])
    if tag == "rr" and counter[2] is not None and len(items) == 1 and type(items[0]) is int:
        if 0 <= items[0] < len(counter[2]):
            return counter[2][items[0]]
    if len(tag) <= 2 and tag in _rich().TAGS:
        rich = _rich()
        try:
            return rich.build(tag, items, lambda item: _value(item, depth - 1, counter))
        except rich.RichError as exc:
            raise WireError(str(exc)) from None
    raise WireError(f"malformed tagged value {tag[:20]!r}")


def _tree(value, depth, rich=True, hook=None):
    if depth < 0:
        raise WireError("value nests too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is float:
        return value
    if kind is int:
        return value if value.bit_length() <= _PLAIN_INT_BITS else ["i", hex(value)]
    if kind in _TAG_OF:
        return [_TAG_OF[kind], *(_tree(item, depth - 1, rich, hook) for item in value)]
    if kind is dict:
        flat = ["d"]
        for key, item in value.items():
            flat.append(_tree(key, depth - 1, rich, hook))
            flat.append(_tree(item, depth - 1, rich, hook))
        return flat
    if kind is bytes:
        return ["b", value.hex()]
    if kind is complex:
        return ["c", value.real, value.imag]
    if kind is Ref:
        return ["h", value.id]
    if hook is not None:
        reference = hook(value)
        if reference is not None:
            return reference
    if rich:
        module = _rich()
        try:
            found = module.tagged(value, depth, lambda item, below: _tree(item, below, True, hook))
        except module.RichError as exc:
            raise WireError(str(exc)) from None
        if found is not None:
            return found
    return _tree(_plain_base(value), depth, rich, hook)


def _plain_base(value):
    """The exact builtin value behind a subclass instance or a numpy value; WireError when there is none."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray | numpy.generic):
        converted = value.tolist()
        if type(converted) is type(value) or isinstance(converted, numpy.generic | numpy.ndarray):
            raise WireError(f"numpy value of dtype {value.dtype} has no plain form")
        return converted
    # Unbound base-type methods read the builtin payload; overridden methods of the subclass are not called.
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes.__bytes__(value)
    if isinstance(value, complex):
        return complex.__complex__(value)
    if isinstance(value, dict):
        return dict(dict.items(value))
    if isinstance(value, list):
        return list(list.__iter__(value))
    if isinstance(value, tuple):
        return tuple(tuple.__iter__(value))
    if isinstance(value, set):
        return set(set.__iter__(value))
    if isinstance(value, frozenset):
        return frozenset(frozenset.__iter__(value))
    raise WireError(f"a {type(value).__name__} is not plain data")
