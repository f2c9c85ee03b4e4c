"""Batch harness shipped into the sandbox beside `solution.py`; run as its main file, never imported here.

The caller predefines `SPEC` (the kind and the inputs) and `NONCE` in this module's globals. Kinds:
`stdin_stdout` runs the whole program once per case with that case's stdin; `function_call` calls the named
function with each case's arguments; both print, after a marker line, the repr of a list with one
{"output": ..., "error": ...} per case. Expected outputs never enter the sandbox: the caller compares, so a
program that forges this report still has to produce the right outputs. `check` runs assert-style tests
(HumanEval's `check(candidate)`); as there is no output to compare, success is reported with the nonce, so a
solution that exits early with status 0 does not pass. Only builtins and light modules are imported: every
import is paid once per run.
"""

import io
import sys

MARKER = "\n@@swarmrl-harness-results@@\n"
MAX_CAPTURE = 1 << 18
PLAIN_SCALARS = (str, int, float, complex, bool, type(None))


def _plain(value, depth=0):
    """The value as nested lists/dicts of scalars (tuples become lists), or raise TypeError."""
    if depth > 50:
        raise TypeError("result nests too deeply")
    if isinstance(value, PLAIN_SCALARS):
        return value
    if isinstance(value, list | tuple):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _plain(item, depth + 1) for key, item in value.items()}
    raise TypeError(f"result of type {type(value).__name__} is not plain data")


def _require_plain(value, depth=0):
    """Return `value` unchanged if it is built from exact builtin data types; custom objects (e.g. one whose
    __eq__ always answers True) raise TypeError so they cannot satisfy `assert candidate(x) == y`."""
    if depth > 50:
        raise TypeError("result nests too deeply")
    kind = type(value)
    if kind in PLAIN_SCALARS:
        return value
    if kind in (list, tuple, set, frozenset):
        for item in value:
            _require_plain(item, depth + 1)
        return value
    if kind is dict:
        for key, item in value.items():
            _require_plain(key, depth + 1)
            _require_plain(item, depth + 1)
        return value
    raise TypeError(f"candidate returned a {kind.__name__}, not plain data")


def _run_stdin_case(code, stdin_text):
    # Text streams over bytes, so programs that use sys.stdin.buffer / sys.stdout.buffer work too.
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin_text.encode("utf-8")), encoding="utf-8")
    captured = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    sys.stdout = captured
    error = None
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        if exc.code not in (None, 0):
            error = f"SystemExit: {exc.code}"
    except BaseException as exc:  # noqa: BLE001 — the case failed; report why and go on
        error = f"{type(exc).__name__}: {exc}"[:1000]
    finally:
        sys.stdout = sys.__stdout__
    try:
        captured.flush()
        output = captured.buffer.getvalue()[:MAX_CAPTURE].decode("utf-8", errors="replace")
    except ValueError:  # the program closed its stdout
        output, error = "", error or "stdout was closed"
    return {"output": output, "error": error}


def _run_call_case(namespace, fn_name, args):
    function = namespace.get(fn_name)
    if not callable(function):
        return {"output": None, "error": f"no function named {fn_name}"}
    sys.stdout = io.StringIO()
    try:
        return {"output": _plain(function(*args)), "error": None}
    except BaseException as exc:  # noqa: BLE001
        return {"output": None, "error": f"{type(exc).__name__}: {exc}"[:1000]}
    finally:
        sys.stdout = sys.__stdout__


def _run_check(code, spec, nonce):
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(code, namespace)
        exec(compile(spec["test"], "tests.py", "exec"), namespace)
        if spec.get("entry_point"):
            candidate = namespace[spec["entry_point"]]
            namespace["check"](lambda *args, **kwargs: _require_plain(candidate(*args, **kwargs)))
    except BaseException as exc:  # noqa: BLE001 — SystemExit included: exiting early is not passing
        return {"nonce": nonce, "passed": False, "error": f"{type(exc).__name__}: {exc}"[:1000]}
    finally:
        sys.stdout = sys.__stdout__
    return {"nonce": nonce, "passed": True, "error": None}


def main(spec, nonce):
    with open("solution.py", encoding="utf-8") as handle:
        code = compile(handle.read(), "solution.py", "exec")
    if spec["kind"] == "check":
        results = _run_check(code, spec, nonce)
    elif spec["kind"] == "stdin_stdout":
        results = [_run_stdin_case(code, case) for case in spec["inputs"]]
    else:
        namespace = {"__name__": "solution", "__builtins__": __builtins__}
        sys.stdout = io.StringIO()
        try:
            exec(code, namespace)
        finally:
            sys.stdout = sys.__stdout__
        results = [_run_call_case(namespace, spec["fn_name"], args) for args in spec["inputs"]]
    sys.__stdout__.write(MARKER + repr(results))
    sys.__stdout__.flush()


if __name__ == "__main__":
    # Popped so the solution cannot read it as `__main__.NONCE`.
    main(globals().pop("SPEC"), globals().pop("NONCE"))
