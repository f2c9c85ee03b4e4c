"""Lets test packages share helpers (`from integration.spine.spine_helpers import ...`) and SFT'd starting
policies (`shared_sft`); runs the swarm-scale tests one at a time, and first; gives tests marked `timing` a
core's share of the machine (`cpu_slots.py`).

Tests marked `swarm` start a swarm, islands or DiLoCo replicas: many processes with deadlines. `make test` leaves
them out and `make test-swarm` runs them in one process, one after another. Two at once on a 2-core machine
starve each other past those deadlines, so when they run on parallel workers anyway (`pytest -n auto tests`)
each holds a lock shared by the workers of the run while it runs, and they go first: the worker that starts on
them works through them while the others share the rest of the suite.
"""

import fcntl
import gc
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cpu_slots import cores, holding_slots, slots_needed, workers  # noqa: E402

from swarmrl.cli import collect_garbage_less_often  # noqa: E402
from swarmrl.logs import installed_here  # noqa: E402

# Test workers import what the role processes import, and then some: collection took 2.5 s less CPU with it.
collect_garbage_less_often()


def pytest_collection_modifyitems(config, items):
    # A stable sort: the order of the tests within each part is kept. (The slow tests are not put first: each
    # worker is handed a contiguous run of the suite up front, and one would get them all.)
    items.sort(key=lambda item: item.get_closest_marker("swarm") is None)


def pytest_collection_finish(session):
    # What collection imported (torch, transformers, every test module: hundreds of thousands of objects) lives
    # until the worker exits; frozen, the collector's full passes stop walking it again and again (2026-12-07,
    # the coordinator's adversarial and the inference and trainer unit tests in one process, before the larger
    # young generation: 9.5 s of full passes in 26 collections, 5.9 s in 55 with it frozen).
    gc.freeze()


def run_directory(tmp_path_factory) -> Path:
    """The directory every worker of this test run shares (a worker's own base directory lies in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Around setup, call and teardown: a module's fixtures start servers and processes in its first test's setup.
    total = workers()
    if total <= cores():  # a timing test would hold one slot, like every other: nothing can wait
        yield
        return
    needed = slots_needed(item.get_closest_marker("timing") is not None, total, cores())
    with holding_slots(run_directory(item.config._tmp_path_factory), needed, total):
        yield


@pytest.fixture(autouse=True)
def logging_left_as_found():
    """A test that runs a command in this process (typer's CliRunner, a role's main) routes the root logger to
    that run's stderr (`swarmrl.logs.configure_logging`), which is closed once the run ends. Left in place, the
    handler makes every later log line of the worker, from a relay's thread say, a "Logging error" on the
    console instead of a record."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers and installed_here(h)]:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def one_swarm_at_a_time(request, tmp_path_factory):
    if request.node.get_closest_marker("swarm") is None:
        yield
        return
    with open(run_directory(tmp_path_factory) / "swarm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def shared_sft(tmp_path_factory) -> Callable:
    """`shared_sft(config)` puts the starting policy of `config` into its run root's SFT cache, where
    `prepare_run` reuses it, as it does an identical earlier config's. Many tests prepare a run whose SFT (the
    same tiny model, tasks and steps) is not what they test; it is trained once per test run, by whichever
    worker needs it first, instead of once per test (about 18 s each on 2 cores)."""
    from swarmrl.launch.prepare import build_start_policy, sft_cache_key

    shared = run_directory(tmp_path_factory) / "shared-sft"
    shared.mkdir(exist_ok=True)

    def seed_cache(config) -> None:
        assert config.sft.cache, "prepare_run would not read the cache: prepare this run on its own"
        name = f"sft-{sft_cache_key(config)}"
        with open(shared / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            built = config.model_copy(deep=True)
            built.run.root = shared
            if not (shared / ".cache" / name / "config.json").is_file():
                build_start_policy(built, shared / "policies" / name)
        shutil.copytree(shared / ".cache" / name, config.run.root / ".cache" / name, dirs_exist_ok=True)

    return seed_cache


@pytest.fixture(scope="session")
def chat_tokenizer():
    """The shipped Qwen-sized tokenizer (151,669 entries), read once per worker instead of once per test:
    each read parses about a second of JSON. Tests only read it; one that edits a tokenizer loads its own."""
    from swarmrl.models.chat_tokenizer import load_chat_tokenizer

    return load_chat_tokenizer()
