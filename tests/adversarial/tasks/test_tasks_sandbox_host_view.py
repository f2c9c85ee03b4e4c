"""What a completion can read inside the sandbox names no host path (issue 33): not the venv, not the project.

The program below is what a curious completion would run: it reads everything /proc shows about every
process it can see (the mount table, command lines, environments, cwd/root/exe/fd links, memory maps,
cgroups), every file under /sandbox (the scripts, their compiled copies, the allowed packages and theirs)
and what Python itself reports, and prints every place one of the given strings occurs.
"""

import json
import sys
from pathlib import Path

import pytest

import swarmrl
from swarmrl.configs.tasks import CodeRewardConfig
from swarmrl.tasks.sandbox import SandboxLimits, SandboxSession, sandbox_plan

SNOOP = r"""
import json, os, sys
secrets = [s.encode() for s in json.loads(sys.stdin.read())]
hits, seen = [], 0

def look(where, data):
    global seen
    seen += 1
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    for secret in secrets:
        if secret in data:
            hits.append(f"{where}: {secret.decode()}")

def read(path):
    try:
        with open(path, "rb") as handle:
            look(path, handle.read(1 << 24))
    except OSError:
        pass

def link(path):
    try:
        look(path, os.readlink(path))
    except OSError:
        pass

PER_PROCESS = ("cmdline", "environ", "mountinfo", "mounts", "mountstats", "maps", "cgroup", "status",
               "stat", "comm", "cpuset", "attr/current", "sched", "limits", "io", "wchan")
pids = [p for p in os.listdir("/proc") if p.isdigit()] + ["self", "thread-self"]
for pid in pids:
    for name in PER_PROCESS:
        read(f"/proc/{pid}/{name}")
    for name in ("cwd", "root", "exe"):
        link(f"/proc/{pid}/{name}")
    for folder in ("fd", "map_files"):
        try:
            entries = os.listdir(f"/proc/{pid}/{folder}")
        except OSError:
            entries = []
        for entry in entries:
            link(f"/proc/{pid}/{folder}/{entry}")
for name in ("cmdline", "mounts", "self/mountinfo", "filesystems", "swaps", "partitions"):
    read(f"/proc/{name}")
for top in ("/sandbox", "/etc", "/tmp"):
    for folder, _, names in os.walk(top):
        for name in names:
            read(os.path.join(folder, name))
look("sys", repr((sys.path, sys.executable, sys.argv, sys.modules.keys(), os.environ, os.getcwd())))
look("modules", repr([getattr(m, "__file__", "") for m in list(sys.modules.values())]))
print(json.dumps({"hits": hits, "seen": seen}))
"""


def host_paths() -> list[str]:
    paths = [str(Path(swarmrl.__file__).resolve().parents[2])]  # the project's checkout
    if sys.prefix != sys.base_prefix:
        paths.append(sys.prefix)  # the venv
    return paths


@pytest.mark.parametrize("allowed", [["numpy"], []], ids=["numpy", "stdlib-only"])
def test_nothing_the_sandbox_can_read_names_the_venv_or_the_project(allowed):
    plan = sandbox_plan(CodeRewardConfig(allowed_packages=allowed))
    secrets = host_paths()
    program = ("import numpy\n" if allowed else "") + SNOOP  # numpy's compiled files mapped, too
    with SandboxSession(plan, SandboxLimits(wall_seconds=60, cpu_seconds=60), program) as session:
        outcome = session.run(json.dumps(secrets))
    assert outcome.succeeded, outcome.stderr
    report = json.loads(outcome.stdout)
    assert report["seen"] > 200  # it did read the mount table, pid 1 and the packages
    assert report["hits"] == []


def test_a_package_imported_in_the_sandbox_names_only_sandbox_paths():
    plan = sandbox_plan(CodeRewardConfig(allowed_packages=["numpy"]))
    program = (
        "import numpy, numpy.linalg, traceback, types\n"
        "print(numpy.__file__)\n"
        "own = [f for f in vars(numpy.linalg._linalg).values() if type(f) is types.FunctionType]\n"
        "code = [f.__code__ for f in own if f.__module__ == 'numpy.linalg._linalg'][0]\n"
        "print(code.co_filename)\n"
        "try:\n    numpy.linalg.inv(numpy.zeros((2, 2)))\nexcept Exception:\n    traceback.print_exc()\n"
    )
    with SandboxSession(plan, SandboxLimits(wall_seconds=60), program) as session:
        outcome = session.run("")
    assert outcome.succeeded, outcome.stderr
    assert outcome.stdout.splitlines()[:2] == [
        "/sandbox/site/numpy/__init__.py",
        "/sandbox/site/numpy/linalg/_linalg.py",
    ]
    assert "/sandbox/site/numpy/linalg/" in outcome.stderr  # the traceback's frames
    assert not any(path in outcome.stdout + outcome.stderr for path in host_paths())
