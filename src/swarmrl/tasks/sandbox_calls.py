"""The solution process's answers to call requests. Runs inside the sandbox; standard library only.

Two request forms, answered in order by the one solution process of a session:

    ("call", name, args, kwargs)
        -> ("returned", value) | ("raised", type_name, message) | ("failed", why)
    ("invoke", op, target, name, args, kwargs)
        -> ("value", value, printed, mutated) | ("items", [value...], printed, mutated)
         | ("object", [id, type_name, [method names]], printed, mutated)
         | ("raised", [type_name, message, [builtin base names]], printed, mutated) | ("failed", why)

`invoke` ops: "call" (the target, a global name or an object id, called), "method" (the target's attribute
`name` called), "getattr" (the target's attribute `name`, or the global itself when `name` is null),
"builtin" (`name` one of len, iter, next, str, repr, contains, getitem, setitem, delitem, applied to the
object and the arguments), "names" (what the solution's module defines: functions, classes with their
methods and builtin exception bases, other values) and "records" (the class names, args[0], whose objects
travel by value both ways from now on: the task's `ListNode`, `TreeNode`; `sandbox_records`). `printed` is what the solution wrote to stdout meanwhile;
`mutated` holds [position or keyword, value after the call] for every argument that is a list, dict or set,
so that the caller's own object can be brought to the same state, as in-process it would be.

A name the solution does not define at module level is looked up as a method of its classes, `Solution`
first, on one instance made without arguments (LeetCode's layout, as LiveCodeBench's harness does it).
Objects travel as values when they are plain data (`sandbox_wire`); an iterator's items are consumed (up to
MAX_ITEMS); instances of the solution's own classes, and callables, come back as object ids where the request
allows it: when it instantiated a class or worked on an object already held. A module-level function's
result never does, so its verdict rests on plain data. Nothing here is trusted by the other side.
"""

import io
import operator
import sys
import types

import sandbox_wire

MAX_ITEMS = 100_000
MAX_NAMES = 2000
MAX_METHODS = 500
_BUILTINS: dict = {  # name -> builtin callable
    "len": len,
    "iter": iter,
    "next": next,
    "str": str,
    "repr": repr,
    "contains": operator.contains,
    "getitem": operator.getitem,
    "setitem": operator.setitem,
    "delitem": operator.delitem,
}
_MISSING = object()
_MUTABLE = (list, dict, set)


class CannotAnswer(Exception):  # noqa: N818 — a reply, not an error of this process
    """The request names nothing the solution has, or its result cannot be sent: a "failed" reply."""


class Printed(io.TextIOBase):
    """sys.stdout while a request runs: keeps what the solution prints, up to a limit."""

    def __init__(self, limit):
        self.parts = []
        self.size = 0
        self.limit = limit

    def writable(self):
        return True

    def write(self, text):
        text = str.__str__(text) if isinstance(text, str) else str(text)
        self.size += len(text)
        if self.size > self.limit:
            raise OSError("the solution printed more than the output limit")
        self.parts.append(text)
        return len(text)

    def text(self):
        return "".join(self.parts)


class Calls:
    def __init__(self, namespace, load_error, max_output):
        self.namespace = namespace
        self.load_error = load_error
        self.max_output = max_output
        self.objects = {}  # handle id -> object (held, so that ids stay valid)
        self.handle_of = {}  # id(object) -> handle id: one object, one handle
        self.instances = {}  # class name -> the instance whose methods stand for bare names
        self.methods_of = {}  # type -> its method names
        self.records = set()  # names of the classes whose objects travel by value

    def answer(self, request):
        if self.load_error:
            return ("failed", self.load_error)
        if request[0] == "call" and len(request) == 4:
            return self.plain_call(request[1], request[2], request[3])
        if request[0] == "invoke" and len(request) == 6:
            return self.invoke(*request[1:])
        return ("failed", "malformed request")

    def plain_call(self, name, args, kwargs):
        """The original call form: plain values only, exceptions by name."""
        try:
            function = self.named(name)
        except CannotAnswer as exc:
            return ("failed", str(exc))
        except BaseException as exc:  # noqa: BLE001 — making the Solution instance raised
            return ("raised", type(exc).__name__, safe_str(exc))
        if not callable(function):
            return ("failed", f"the solution defines no function {name!r}")
        try:
            return ("returned", function(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 — reported as the call's outcome
            return ("raised", type(exc).__name__, safe_str(exc))

    def invoke(self, op, target, name, args, kwargs):
        printed = Printed(self.max_output)
        saved = sys.stdout
        sys.stdout = printed
        try:
            try:
                args, kwargs = self.resolved(args), self.resolved(kwargs)
                value, handles = self.perform(op, target, name, args, kwargs)
                reply = self.result(value, handles)
            except CannotAnswer as exc:
                return ("failed", str(exc))
            except BaseException as exc:  # noqa: BLE001 — the solution raised: reported with its type
                reply = ("raised", [type(exc).__name__, safe_str(exc), builtin_bases(type(exc))])
        finally:
            sys.stdout = saved
        return (*reply, printed.text(), mutated_arguments(args, kwargs, self.records))

    def perform(self, op, target, name, args, kwargs):
        """(result, whether an object id may stand for it)."""
        if op == "names":
            return self.names(), False
        if op == "records":
            self.records = {name for name in (args[0] if args else ()) if type(name) is str}
            return None, False
        subject = self.subject(target)
        if op == "call":
            if not callable(subject):
                raise CannotAnswer(f"{describe_target(target)} is not callable")
            function_result = isinstance(target, str) and not isinstance(subject, type)
            return subject(*args, **kwargs), not function_result
        if op == "method":
            return getattr(subject, name)(*args, **kwargs), True
        if op == "getattr":
            return (subject if name is None else getattr(subject, name)), True
        if op == "builtin" and name in _BUILTINS and not isinstance(target, str):
            return _BUILTINS[name](subject, *args), True
        raise CannotAnswer(f"unknown operation {op!r}")

    def subject(self, target):
        if isinstance(target, str):
            return self.named(target)
        if type(target) is int and target in self.objects:
            return self.objects[target]
        raise CannotAnswer(f"the sandbox holds no object {target!r}")

    def named(self, name):
        """A global of the solution, else a method of its classes (LeetCode's `class Solution`)."""
        solution = self.namespace.get("Solution")
        if isinstance(solution, type) and name in dir(solution) and name != "Solution":
            return getattr(self.instance("Solution", solution), name)
        value = self.namespace.get(name, _MISSING)
        if value is not _MISSING:
            return value
        for class_name, candidate in list(self.namespace.items()):
            if isinstance(candidate, type) and candidate.__module__ == "solution" and name in vars(candidate):
                return getattr(self.instance(class_name, candidate), name)
        raise CannotAnswer(f"the solution defines no function {name!r}")

    def instance(self, class_name, cls):
        if class_name not in self.instances:
            self.instances[class_name] = cls()
        return self.instances[class_name]

    def record_class(self, name):
        """The solution's class of a record name (None when it has no such class of its own)."""
        kind = self.namespace.get(name) if name in self.records else None
        return kind if isinstance(kind, type) and kind.__module__ == "solution" else None

    def result(self, value, handles):
        if handles and needs_handle(value) and type(value).__name__ not in self.records:
            return ("object", self.handle(value))
        if type(value) in (range, type({}.keys()), type({}.values()), type({}.items())):
            return ("value", list(value))  # an iterable view: its items, as a list
        if is_iterator(value):
            items: list[object] = []
            for item in value:
                if len(items) == MAX_ITEMS:
                    raise CannotAnswer(f"the iterator yielded more than {MAX_ITEMS} items")
                items.append(item)
            return ("items", items)
        return ("value", value)

    def handle(self, value):
        key = id(value)
        if key not in self.handle_of:
            self.handle_of[key] = len(self.objects)
            self.objects[len(self.objects)] = value
        kind = type(value)
        if kind not in self.methods_of:
            self.methods_of[kind] = method_names(kind)
        return [self.handle_of[key], str(kind.__name__), self.methods_of[kind]]

    def names(self):
        found = {}
        for name, value in list(self.namespace.items())[:MAX_NAMES]:
            if name.startswith("__") or not isinstance(name, str):
                continue
            if isinstance(value, type):
                found[name] = ["class", method_names(value), builtin_bases(value)]
            elif isinstance(value, types.ModuleType):
                found[name] = ["module"]
            elif callable(value):
                found[name] = ["function"]
            else:
                found[name] = ["value"]
        return found

    def resolved(self, value):
        """Arguments with the objects they reference in place of the references."""
        kind = type(value)
        if kind is sandbox_wire.Ref:
            return self.subject(value.id)
        if kind is list or kind is tuple:
            return kind(self.resolved(item) for item in value)
        if kind is dict:
            return {key: self.resolved(item) for key, item in value.items()}
        return value


def mutated_arguments(args, kwargs, records):
    """[position or keyword, value] of each list, dict, set or record argument that can be sent."""
    found = []
    for key, value in [*enumerate(args), *kwargs.items()]:
        if type(value) in _MUTABLE or type(value).__name__ in records:
            try:
                sandbox_wire.encode(value, records=records)
            except BaseException:  # noqa: BLE001, S112 — it holds objects: the caller's copy stays as it was
                continue
            found.append([key, value])
    return found


def needs_handle(value):
    kind = type(value)
    if kind.__module__ == "solution":
        return not (issubclass(kind, tuple) and hasattr(kind, "_fields"))
    return callable(value)


def is_iterator(value):
    kind = type(value)
    return hasattr(kind, "__next__") and hasattr(kind, "__iter__")


def method_names(kind):
    names = []
    for name in dir(kind)[: MAX_METHODS * 4]:
        if name.startswith("__"):
            continue
        try:
            if callable(getattr(kind, name)):
                names.append(name)
        except BaseException:  # noqa: BLE001, S112 — a hostile descriptor: that name is no method
            continue
    return names[:MAX_METHODS]


def builtin_bases(kind):
    """The builtin exception classes in an exception type's MRO (none for other types)."""
    try:
        if not issubclass(kind, BaseException):
            return []
        mro = type.__dict__["__mro__"].__get__(kind)
        return [
            base.__name__ for base in mro if base.__module__ == "builtins" and issubclass(base, BaseException)
        ]
    except BaseException:  # noqa: BLE001 — a hostile metaclass
        return ["Exception", "BaseException"]


def describe_target(target):
    return repr(target) if isinstance(target, str) else f"object {target}"


def safe_str(exc):
    try:
        return str(exc)[:1000]
    except BaseException:  # noqa: BLE001 — a hostile __str__
        return "<unprintable>"
