"""The solution as the trusted side's test code sees it: stand-ins whose every use is a request to the sandbox.

`Remote` wraps one sandbox session. Its stand-ins for the solution's names:
- a function: `Candidate`, whose calls go into the sandbox and come back as fresh plain or rich values (an
  iterator as an iterator over the items it yielded), or raise the solution's exception (below);
- a class: a mirror type (a `RemoteObject` subclass of the same name): calling it makes the object in the
  sandbox and returns a `RemoteObject` for it, so `isinstance(obj, Stack)` holds and `obj.push(3)`, `len(obj)`,
  `iter(obj)`, `obj[0]`, `str(obj)` are requests; the results are values again;
- an exception class: a mirror exception type deriving from the same builtin exceptions, so that
  `pytest.raises(ValueError)`, `except ValueError` and `pytest.raises(solution.Empty)` catch what the solution
  raised; a builtin exception arrives as itself (the iteration protocol's excepted: a StopIteration out of a
  call would quietly end `all(map(candidate, xs))` as a pass).
- `module()`: the solution as the module `solution` that `from solution import f` imports.

A `RemoteObject` never lets the solution decide a comparison or a truth value: `==` is identity, ordering and
arithmetic are unsupported and `bool()` is refused, so an object whose `__eq__` or `__bool__` always says yes
gains nothing. Every request counts in the run's `Ledger` (returned or raised), and a broken session is noted
in `broken` even when the test code swallows the exception.
"""

from __future__ import annotations

import builtins
import sys
import types
from collections.abc import Iterator
from typing import Any

from swarmrl.tasks.check_ledger import Ledger
from swarmrl.tasks.sandbox import SandboxSession, SessionBroken
from swarmrl.tasks.sandbox_invoke import ObjectRef, Raised
from swarmrl.tasks.sandbox_wire import Ref

PASS_THROUGH = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type)
    and issubclass(value, Exception)
    and not issubclass(value, StopIteration | StopAsyncIteration)
)


_TEST_MODULES = frozenset({"pytest", "numpy", "np", "solution"})


class CandidateError(Exception):
    """The solution raised an exception that has no trusted counterpart (not derived from a builtin one)."""


class Remote:
    """One session's solution, as trusted stand-ins."""

    def __init__(self, session: SandboxSession, ledger: Ledger, broken: list[str]) -> None:
        self.session = session
        self.ledger = ledger
        self.broken = broken
        self._names: dict[str, list] | None = None
        self._types: dict[str, type] = {}
        self._objects: dict[int, RemoteObject] = {}
        self._functions: dict[str, Candidate] = {}

    def names(self) -> dict[str, list]:
        """What the solution's module defines: {name: [kind, ...]} (see `sandbox_calls`)."""
        if self._names is None:
            listed = self.invoke("names", None)
            entries = listed.items() if type(listed) is dict else ()
            self._names = {name: entry for name, entry in entries if _well_formed(name, entry)}
        return self._names

    def use_records(self, classes: dict[str, type]) -> None:
        """Objects of these trusted classes (the task's `ListNode`, `TreeNode`) travel by value from now on,
        both ways; the sandbox makes them with the solution's classes of the same names, and the trusted side
        receives them as instances of these."""
        if classes:
            self.session.record_types = dict(classes)
            self.invoke("records", None, None, (sorted(classes),))

    def star_names(self) -> list[str]:
        """What `from solution import *` binds: the solution's functions, classes and values, never a name
        that would shadow a builtin or a module the tests import (a solution's `sorted` or `math` stays out
        of the test's namespace, as issue 33 has it)."""
        return [
            name
            for name, entry in self.names().items()
            if not name.startswith("_")
            and entry[0] != "module"
            and name not in vars(builtins)
            and name not in sys.stdlib_module_names
            and name not in _TEST_MODULES
        ]

    def function(self, name: str) -> Candidate:
        if name not in self._functions:
            self._functions[name] = Candidate(self, name)
        return self._functions[name]

    def global_stand_in(self, name: str) -> Any:
        """The stand-in for the solution's global `name`; AttributeError when it defines none."""
        entry = self.names().get(name)
        if type(entry) is not list or not entry:
            raise AttributeError(f"the solution defines no {name!r}")
        if entry[0] == "function":
            return self.function(name)
        if entry[0] == "class" and len(entry) == 3:
            if entry[2]:  # an exception class
                return self.exception_type(name, self._exception_bases(entry[2]) or (CandidateError,))
            return self.class_type(name, tuple(entry[1]))
        if entry[0] == "value":
            return self.invoke("getattr", name)
        raise AttributeError(f"the solution's {name!r} is a module, which is not importable from it")

    def module(self, name: str = "solution") -> types.ModuleType:
        return SolutionModule(name, self)

    def invoke(self, op: str, target: str | int | None, name: str | None = None, args=(), kwargs=None) -> Any:
        """The trusted value of one operation; raises the solution's exception as its mirror. A list, dict or
        set argument the solution changed in place is changed the same way here, so that the test reads
        the caller's object after the call as it would in-process."""
        reply = self._reply(op, target, name, args, kwargs)
        for key, after in reply.mutated:
            passed = _argument(args, kwargs or {}, key)
            if type(passed) is type(after):
                bring_to(passed, after)
        if reply.kind == "raised":
            self.ledger.raised_calls += 1
            raise self.exception(reply.raised)
        if op not in ("names", "records"):  # what the solution defines is no answer of it
            self.ledger.returned_calls += 1
        if reply.kind == "items":
            return iter(reply.value)
        if reply.kind == "object":
            return self.stand_in(reply.ref)
        return reply.value

    def next_item(self, target: int) -> Any:
        """`next()` on a held iterator: its StopIteration is the protocol's, and ends the loop here too."""
        reply = self._reply("builtin", target, "next", (), None)
        if reply.kind == "raised" and reply.raised.type_name == "StopIteration":
            raise StopIteration
        if reply.kind == "raised":
            raise self.exception(reply.raised)
        return self.stand_in(reply.ref) if reply.kind == "object" else reply.value

    def _reply(self, op, target, name, args, kwargs):
        try:
            reply = self.session.invoke(op, target, name, _refs(args), _refs(kwargs or {}))
        except SessionBroken as exc:
            self.broken.append(str(exc))
            raise
        if reply.printed:
            sys.stdout.write(reply.printed)  # into the test's captured output (capsys, redirect_stdout)
        return reply

    def stand_in(self, ref: ObjectRef) -> RemoteObject:
        if ref.id not in self._objects:
            cls = self._types.get(ref.type_name)
            if not (isinstance(cls, type) and issubclass(cls, RemoteObject)):
                cls = RemoteObject
            held = object.__new__(cls)
            object.__setattr__(held, "_swarmrl_remote", self)
            object.__setattr__(held, "_swarmrl_ref", ref)
            self._objects[ref.id] = held
        return self._objects[ref.id]

    def class_type(self, name: str, methods: tuple[str, ...]) -> type:
        if name not in self._types:
            namespace = {"__slots__": (), "__module__": "solution", "_swarmrl_class_remote": self}
            namespace["_swarmrl_methods"] = methods
            self._types[name] = RemoteClass(name, (RemoteObject,), namespace)
        return self._types[name]

    def exception_type(self, name: str, bases: tuple[type, ...]) -> type:
        if name not in self._types:
            try:
                self._types[name] = type(name, bases, {"__module__": "solution"})
            except TypeError:  # bases whose layouts conflict: the first one stands for them
                self._types[name] = type(name, bases[:1], {"__module__": "solution"})
        return self._types[name]

    def exception(self, raised: Raised) -> BaseException:
        name, message = raised.type_name, raised.message
        if name in PASS_THROUGH and raised.builtin_bases[:1] == (name,):
            kind: type = getattr(builtins, name)
        else:  # the solution's own class; one derived from no passed-through builtin is a CandidateError
            kind = self.exception_type(name, self._exception_bases(raised.builtin_bases) or (CandidateError,))
        try:
            return kind(message)
        except TypeError:  # e.g. UnicodeDecodeError wants five arguments
            return CandidateError(f"{name}: {message}")

    @staticmethod
    def _exception_bases(names: list[str] | tuple[str, ...]) -> tuple[type, ...]:
        """The most derived of the passed-through builtin exceptions among `names`."""
        found = [getattr(builtins, n) for n in names if n in PASS_THROUGH]
        return tuple(c for c in found if not any(d is not c and issubclass(d, c) for d in found))


class Candidate:
    """Stands for a function of the solution: each call is a request to the sandbox."""

    def __init__(self, remote: Remote, name: str) -> None:
        self.__name__ = name
        self._remote = remote

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote.invoke("call", self.__name__, None, args, kwargs)

    def __repr__(self) -> str:
        return f"<sandboxed {self.__name__}>"


class RemoteClass(type):
    """The metaclass of mirror types: calling one makes the object in the sandbox; class attributes are read
    there (an Enum's members, a static method)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._swarmrl_class_remote.invoke("call", cls.__name__, None, args, kwargs)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        remote = cls.__dict__.get("_swarmrl_class_remote")
        if remote is None:
            raise AttributeError(name)
        if name in cls.__dict__.get("_swarmrl_methods", ()):
            return lambda *args, **kwargs: remote.invoke("method", cls.__name__, name, args, kwargs)
        return remote.invoke("getattr", cls.__name__, name)


class RemoteObject:
    """An object the sandbox holds; see the module docstring for what it answers."""

    __slots__ = ("_swarmrl_remote", "_swarmrl_ref")
    _swarmrl_remote: Remote
    _swarmrl_ref: ObjectRef

    def _ask(self, op: str, name: str | None = None, *args: Any) -> Any:
        return self._swarmrl_remote.invoke(op, self._swarmrl_ref.id, name, args)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_swarmrl_"):
            raise AttributeError(name)
        if name in self._swarmrl_ref.methods:
            return BoundRemoteMethod(self, name)
        return self._ask("getattr", name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"setting {name!r} on a sandboxed {self._swarmrl_ref.type_name} is not supported"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._swarmrl_remote.invoke("call", self._swarmrl_ref.id, None, args, kwargs)

    def __len__(self) -> int:
        return _exactly(int, self._ask("builtin", "len"), "len()")

    def __iter__(self) -> Iterator[Any]:
        return self._ask("builtin", "iter")

    def __next__(self) -> Any:
        return self._swarmrl_remote.next_item(self._swarmrl_ref.id)

    def __getitem__(self, key: Any) -> Any:
        return self._ask("builtin", "getitem", key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._ask("builtin", "setitem", key, value)

    def __delitem__(self, key: Any) -> None:
        self._ask("builtin", "delitem", key)

    def __contains__(self, item: Any) -> bool:
        return _exactly(bool, self._ask("builtin", "contains", item), "`in`")

    def __str__(self) -> str:
        return _exactly(str, self._ask("builtin", "str"), "str()")

    def __repr__(self) -> str:
        return _exactly(str, self._ask("builtin", "repr"), "repr()")

    def __bool__(self) -> bool:
        raise TypeError(
            f"the truth value of a sandboxed {self._swarmrl_ref.type_name} is not taken on the trusted side"
        )

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = object.__hash__


class BoundRemoteMethod:
    """`obj.method` of a sandboxed object: calling it is one request."""

    def __init__(self, owner: RemoteObject, name: str) -> None:
        self.__self__ = owner
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        owner = self.__self__
        return owner._swarmrl_remote.invoke("method", owner._swarmrl_ref.id, self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<sandboxed method {self.__name__}>"


class SolutionModule(types.ModuleType):
    """The module `solution` of the test code: its attributes are the solution's stand-ins."""

    def __init__(self, name: str, remote: Remote) -> None:
        super().__init__(name)
        self._swarmrl_remote = remote

    def __getattr__(self, name: str) -> Any:
        if name == "__all__":  # `from solution import *`
            return self._swarmrl_remote.star_names()
        if name.startswith("__"):
            raise AttributeError(name)
        return self._swarmrl_remote.global_stand_in(name)


def _argument(args: tuple, kwargs: dict[str, Any], key: int | str) -> Any:
    """The argument at a position or keyword of a call (None when there is none)."""
    if isinstance(key, str):
        return kwargs.get(key)
    return args[key] if 0 <= key < len(args) else None


def _well_formed(name: Any, entry: Any) -> bool:
    """An entry of the sandbox's "names" reply: ["function"], ["module"], ["value"] or
    ["class", [method names], [builtin exception bases]]."""
    if type(name) is not str or not name.isidentifier() or type(entry) is not list or not entry:
        return False
    if entry[0] in ("function", "module", "value"):
        return len(entry) == 1
    return (
        entry[0] == "class"
        and len(entry) == 3
        and all(type(part) is list and all(type(item) is str for item in part) for part in entry[1:])
    )


def bring_to(mine: Any, after: Any) -> None:
    """Make the list, dict, set or task object `mine` equal to `after` in place, keeping the nested lists,
    dicts and sets that stay where they were (a test holding `row = grid[0]` sees the row change)."""
    if isinstance(mine, list):
        if len(mine) != len(after):
            mine[:] = after
            return
        for index, (old, new) in enumerate(zip(mine, after, strict=True)):
            if type(old) is type(new) and type(old) in (list, dict, set):
                bring_to(old, new)
            elif old is not new:
                mine[index] = new
    elif isinstance(mine, dict):
        for key in [key for key in mine if key not in after]:
            del mine[key]
        for key, new in after.items():
            old = mine.get(key)
            if type(old) is type(new) and type(old) in (list, dict, set):
                bring_to(old, new)
            else:
                mine[key] = new
    elif isinstance(mine, set):
        mine.clear()
        mine.update(after)
    else:  # an object of the task's own class: its attributes as they are now
        for key in [key for key in vars(mine) if key not in vars(after)]:
            object.__delattr__(mine, key)
        for key, value in vars(after).items():
            object.__setattr__(mine, key, value)


def _refs(value: Any) -> Any:
    """Arguments with each sandboxed object replaced by the reference the sandbox knows it by."""
    if isinstance(value, RemoteObject):
        return Ref(value._swarmrl_ref.id)
    kind = type(value)
    if kind is list or kind is tuple:
        return kind(_refs(item) for item in value)
    if kind is dict:
        return {key: _refs(item) for key, item in value.items()}
    return value


def _exactly(kind: type, value: Any, what: str) -> Any:
    if type(value) is not kind:
        raise TypeError(f"the sandboxed object's {what} gave a {type(value).__name__}, not a {kind.__name__}")
    return value
