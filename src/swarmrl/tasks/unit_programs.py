"""Unit-test programs (pytest-style tests, unittest TestCases) run by pytest itself, on the trusted side.

The test file is written to a private temporary folder and pytest runs it in this process (a judge worker),
isolated from everything around it: no plugin autoload, no ini file or conftest from any parent folder
(`-c /dev/null`, `--confcutdir`), no cache, `PYTEST_ADDOPTS` ignored, importlib import mode, output captured
at the `sys` level (so `capsys` sees what the solution printed, relayed by its stand-ins). It stops at the
first failure. `solution` (and the judge's own module of stand-ins) are in `sys.modules` while it runs, so
`from solution import f` imports the solution's stand-ins; the test module is forgotten afterwards.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

_ARGS = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:terminal",
    "-p",
    "no:doctest",
    "--assert=plain",
    "--import-mode=importlib",
    "--capture=sys",
    "--maxfail=1",
    "-W",
    "ignore",
)
TEST_FILE = "test_task.py"


@dataclass
class UnitOutcome:
    collected: int = 0
    passed: int = 0  # tests whose call phase passed
    skipped: int = 0
    failure: str = ""  # the first failure (collection, setup, call or teardown)
    exit_code: int = 0


@dataclass
class _Reports:
    """A pytest plugin: the outcome of every phase of every test."""

    outcome: UnitOutcome = field(default_factory=UnitOutcome)

    def pytest_collectreport(self, report) -> None:  # noqa: ANN001 — pytest's hook signature
        if report.failed and not self.outcome.failure:
            self.outcome.failure = f"collecting the tests failed: {_brief(report)}"

    def pytest_collection_finish(self, session) -> None:  # noqa: ANN001
        self.outcome.collected = len(session.items)

    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001
        if report.failed and not self.outcome.failure:
            self.outcome.failure = f"{report.nodeid} ({report.when}): {_brief(report)}"
        elif report.skipped and report.when in ("setup", "call"):
            self.outcome.skipped += 1
        elif report.passed and report.when == "call":
            self.outcome.passed += 1


def _brief(report) -> str:  # noqa: ANN001 — a pytest report
    """The failure's one-line summary (the exception and its message), else the end of its traceback."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    return str(message)[:400] if message else report.longreprtext[-400:]


def run_unit_program(source: str, modules: dict[str, types.ModuleType]) -> UnitOutcome:
    """Run the prepared test source with pytest; `modules` are importable by name meanwhile."""
    import pytest

    folder = tempfile.mkdtemp(prefix="swarmrl-tests-")
    try:
        path = os.path.join(folder, TEST_FILE)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(source)
        reports = _Reports()
        args = [*_ARGS, "-c", os.devnull, "--rootdir", folder, "--confcutdir", folder, path]
        with _isolated(modules, folder):
            reports.outcome.exit_code = int(pytest.main(args, plugins=[reports]))
        return reports.outcome
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _isolated(modules: dict[str, types.ModuleType], folder: str) -> Iterator[None]:
    saved_env = {name: os.environ.get(name) for name in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    saved_modules = {name: sys.modules.get(name) for name in modules}
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.modules.update(modules)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(folder):
                del sys.modules[name]
