"""The replies of `SandboxSession.invoke`, checked and typed: what one operation on the solution gave back.

The sandbox's side is `sandbox_calls`; nothing in a reply is trusted beyond its shape: values are decoded wire
values (plain or rich data, fresh objects of exact types), names and messages are length-capped strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OPS = ("call", "method", "getattr", "builtin", "names", "records")
_MAX_NAME = 200
_MAX_MESSAGE = 2000


@dataclass(frozen=True)
class ObjectRef:
    """An object the sandbox holds for the session: its id there, its type's name and method names."""

    id: int
    type_name: str
    methods: tuple[str, ...] = ()


@dataclass(frozen=True)
class Raised:
    """An exception the solution raised: its type's name, message, and the builtin classes it derives from."""

    type_name: str
    message: str
    builtin_bases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reply:
    """kind "value" (`value`), "items" (`value` is the list an iterator yielded), "object" (`ref`) or
    "raised" (`raised`); `printed` is what the solution wrote to stdout while it ran."""

    kind: str
    value: Any = None
    ref: ObjectRef | None = None
    raised: Raised | None = None
    printed: str = field(default="", repr=False)
    # (position or keyword, value after the call) of the list, dict and set arguments
    mutated: tuple[tuple[int | str, Any], ...] = field(default=(), repr=False)


class MalformedReply(ValueError):
    """A reply outside the grammar (the session is then broken), or a "failed" reply (`why`)."""


def parse_reply(reply: tuple, record_types: tuple[type, ...] = ()) -> Reply:
    """The typed reply; `record_types` are the classes whose objects may come back as changed arguments."""
    if len(reply) == 2 and reply[0] == "failed" and type(reply[1]) is str:
        raise MalformedReply(reply[1][:_MAX_MESSAGE])
    if len(reply) != 4 or type(reply[2]) is not str or not _is_mutated(reply[3], record_types):
        raise MalformedReply("malformed reply")
    kind, payload, printed, changed = reply
    mutated = tuple((key, value) for key, value in changed)
    if kind == "value":
        return Reply("value", payload, printed=printed, mutated=mutated)
    if kind == "items" and type(payload) is list:
        return Reply("items", payload, printed=printed, mutated=mutated)
    if kind == "object" and _is_object(payload):
        ref = ObjectRef(payload[0], payload[1], tuple(payload[2]))
        return Reply("object", ref=ref, printed=printed, mutated=mutated)
    if kind == "raised" and _is_raised(payload):
        raised = Raised(payload[0], payload[1][:_MAX_MESSAGE], tuple(payload[2]))
        return Reply("raised", raised=raised, printed=printed, mutated=mutated)
    raise MalformedReply(f"malformed {str(kind)[:20]} reply")


def _is_mutated(value: Any, record_types: tuple[type, ...]) -> bool:
    return type(value) is list and all(
        type(pair) is list
        and len(pair) == 2
        and (type(pair[0]) is int or type(pair[0]) is str)
        and (type(pair[1]) in (list, dict, set) or type(pair[1]) in record_types)
        for pair in value
    )


def _names(value: Any) -> bool:
    return type(value) is list and all(type(n) is str and 0 < len(n) <= _MAX_NAME for n in value)


def _is_object(payload: Any) -> bool:
    return (
        type(payload) is list
        and len(payload) == 3
        and type(payload[0]) is int
        and payload[0] >= 0
        and type(payload[1]) is str
        and 0 < len(payload[1]) <= _MAX_NAME
        and _names(payload[2])
    )


def _is_raised(payload: Any) -> bool:
    return (
        type(payload) is list
        and len(payload) == 3
        and type(payload[0]) is str
        and 0 < len(payload[0]) <= _MAX_NAME
        and type(payload[1]) is str
        and _names(payload[2])
    )
