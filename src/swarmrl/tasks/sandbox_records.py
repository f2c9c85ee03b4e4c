"""Records on the sandbox wire: objects of the task's own plain classes (LeetCode's `ListNode`, `TreeNode`)
sent by value, as a graph. Standard library only, like `sandbox_wire`, which imports it when a session names
record classes.

A frame holding records is ["g", [entry...], value]: each entry is [class name, attribute, value, ...] for
one object, the value and the attributes refer to objects as ["rr", index], so a linked list of ten thousand
nodes nests no deeper than one node, and a cycle (LeetCode's "linked list cycle") is sent as it is. The
receiving side makes each object with its own class of that name (`__new__`, no `__init__`) and sets the
attributes; on the trusted side that class is the task's trusted one (its `__eq__` is the dataset's), so
nothing the solution defined runs there.
"""

MAX_RECORDS = 200_000


class RecordError(ValueError):
    """A record graph that is malformed, too large, or names a class the receiver does not have."""


def graph(value, names, tree):
    """The tree of `value` (by `tree(value, hook)`), wrapped as a graph when it holds objects whose class is
    one of `names` (a dict name -> the exact class allowed to travel, or a set of names)."""
    index_of: dict[int, int] = {}
    pending: list[object] = []

    def hook(obj):
        kind = type(obj)
        if kind.__name__ not in names or (isinstance(names, dict) and names[kind.__name__] is not kind):
            return None
        key = id(obj)
        if key not in index_of:
            if len(pending) == MAX_RECORDS:
                raise RecordError(f"more than {MAX_RECORDS} objects")
            index_of[key] = len(pending)
            pending.append(obj)
        return ["rr", index_of[key]]

    root = tree(value, hook)
    entries: list[list[object]] = []
    while len(entries) < len(pending):
        obj = pending[len(entries)]
        fields = object.__getattribute__(obj, "__dict__")
        entry: list[object] = [type(obj).__name__]
        for key, item in list(dict.items(fields)):
            if type(key) is not str:
                raise RecordError(f"a {type(obj).__name__} attribute name that is not a string")
            entry += [key, tree(item, hook)]
        entries.append(entry)
    return ["g", entries, root] if entries else root


def made(entries, class_of):
    """The objects of a graph's entries, attributes not yet set (they may refer to each other)."""
    if type(entries) is not list or len(entries) > MAX_RECORDS:
        raise RecordError("malformed record graph")
    objects: list[object] = []
    for entry in entries:
        if type(entry) is not list or not entry or type(entry[0]) is not str or len(entry) % 2 != 1:
            raise RecordError("malformed record")
        kind = class_of(entry[0])
        if not isinstance(kind, type):
            raise RecordError(f"no class {entry[0][:40]!r} to make a record of")
        try:
            objects.append(object.__new__(kind))
        except TypeError as exc:  # a class object.__new__ cannot make (an int subclass)
            raise RecordError(f"cannot make a {entry[0][:40]}: {exc}") from None
    return objects


def filled(objects, entries, value_of):
    """Set every record's attributes (`value_of` decodes one wire node, its references resolved)."""
    for obj, entry in zip(objects, entries, strict=True):
        for index in range(1, len(entry), 2):
            key = entry[index]
            if type(key) is not str or not key.isidentifier():
                raise RecordError("a record attribute name must be an identifier")
            object.__setattr__(obj, key, value_of(entry[index + 1]))
