"""What a completion can read inside the sandbox names no host path (issue 33): not the venv, not the project.

The program below is what a curious completion would run: it reads everything /proc shows about every
process it can see (the mount table, command lines, environments, cwd/root/exe/fd links, memory maps,
cgroups), every file under /sandbox (the scripts, their compiled copies, the allowed packages and theirs)
and what Python itself reports, and prints every place one of the given strings occurs.
"""

import json
import os
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


WHERE_AM_I = r"""
import json, os, sys
seen = {"mountinfo": open("/proc/self/mountinfo").read(), "prefix": repr((sys.prefix, sys.exec_prefix,
        sys.executable, sys.path, os.getcwd(), dict(os.environ)))}
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
    for name in ("cmdline", "environ"):
        try:
            seen[f"{pid}/{name}"] = open(f"/proc/{pid}/{name}", "rb").read().decode("utf-8", "replace")
        except OSError:
            pass
    for name in ("cwd", "exe", "root"):
        try:
            seen[f"{pid}/{name}"] = os.readlink(f"/proc/{pid}/{name}")
        except OSError:
            pass
print(json.dumps(seen))
"""


def test_the_interpreters_install_and_home_are_not_in_the_mount_table_or_any_command_line():
    """Issue 58: the interpreter's own install (a pyenv or uv prefix under a home directory) showed in
    /proc/self/mountinfo and in pid 1's command line. It runs from /opt/python now."""
    plan = sandbox_plan(CodeRewardConfig())
    with SandboxSession(plan, SandboxLimits(wall_seconds=60), WHERE_AM_I) as session:
        outcome = session.run("")
    assert outcome.succeeded, outcome.stderr
    seen = json.loads(outcome.stdout)
    prefix = os.path.realpath(sys.base_prefix)
    secrets = [*host_paths(), os.path.realpath(sys.executable)]
    if prefix not in ("/", "/usr"):
        secrets.append(prefix)
        assert "/opt/python" in seen["1/cmdline"] and "/opt/python" in seen["prefix"]
    home = os.path.expanduser("~")
    if home not in ("/", "") and not prefix.startswith("/usr"):
        secrets.append(home + "/")
    assert {"mountinfo", "1/cmdline", "self/cwd"} <= seen.keys()
    leaks = [(where, secret) for where, text in seen.items() for secret in secrets if secret in text]
    assert leaks == []
