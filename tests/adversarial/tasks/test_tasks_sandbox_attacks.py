"""The code sandbox as the validator's security boundary (issue 19), attacked from inside.

`sandbox_attack_driver.py` scores hostile completions through the code reward in a separate process that
holds the validator's secrets (coordinator token and database URL in its environment; node key, config and
other nodes' rollout files in its working directory), run four ways: (a) as root from the project's venv,
whose interpreter lies under root's 0700 home; (b) as an unprivileged user this test creates, from a venv of
the system Python; (c) from a venv inside a 0700 directory, as root and as that user. Every run must use
bubblewrap (a downgrade fails the test), score every attack 0 and an honest solution 1, and leave the host
as it was: no file written outside, no connection to the listener, the victim process alive, no sandbox
process left, no disk filled. A control run without OS isolation shows the same attacks do get out when
only the audit hook stands in the way.
"""

import importlib.metadata
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import swarmrl

DRIVER = Path(__file__).with_name("sandbox_attack_driver.py")
SWARMRL_DIR = Path(swarmrl.__file__).resolve().parent
# What `swarmrl.tasks.code_verifier` needs at run time, plus the sandbox's default allowed package.
PACKAGES = (
    "pydantic",
    "pydantic_core",
    "typing_extensions",
    "annotated_types",
    "typing_inspection",
    "prometheus_client",
    "pyseccomp",
    "numpy",
    "psutil",  # tasks/sandbox_cgroup.py: the sandbox's descendants and the cgroup mounts
)
PRIVATE_UIDS = range(1 << 30, (1 << 30) + (1 << 24))
# Attacks that cost the host nothing when they succeed: the control run without OS isolation uses these.
HARMLESS_WHEN_ESCAPED = (
    "audit_hook_patch_then_write_outside",
    "proc_self_mem_then_host_paths",
    "proc_parent_chain",
    "symlink_and_hardlink_tricks",
    "parent_environment",
    "network_to_host_loopback",
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def self_contained_venv(python: str, directory: Path) -> str:
    """A venv of `python` holding swarmrl and its runtime packages as files of its own (hard links where the
    filesystem allows), so nothing outside `directory` but the interpreter is needed."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120)
    venv_python = str(directory / "bin" / "python")
    site = subprocess.run(
        [venv_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    shutil.copytree(SWARMRL_DIR, Path(site) / "swarmrl", copy_function=_link_or_copy)
    providers = importlib.metadata.packages_distributions()
    for name in PACKAGES:
        for dist_name in providers[name]:
            dist = importlib.metadata.distribution(dist_name)
            location = Path(str(dist.locate_file(""))).resolve()
            for top in {file.parts[0] for file in dist.files or ()} - {".."}:
                source, target = location / top, Path(site) / top
                if target.exists() or not source.exists():
                    continue
                if source.is_dir():
                    shutil.copytree(source, target, copy_function=_link_or_copy)
                else:
                    _link_or_copy(str(source), str(target))
    shutil.copy(DRIVER, directory / DRIVER.name)
    return venv_python


def system_python() -> str | None:
    """An interpreter other users can run, with our minor version (extension modules are shared); when we
    are not root, runs as another user are runs as ourselves, with our own interpreter."""
    if os.geteuid() != 0:
        return os.path.realpath(sys.executable)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (f"/usr/bin/python{version}", os.path.realpath(sys.executable)):
        probe = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                candidate,
                "-c",
                "import os, sys; os.listdir(sys.base_prefix); print('%d.%d' % sys.version_info[:2])",
            ],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


@pytest.fixture(scope="module")
def sandbox_user():
    """The unprivileged user of runs (b) and (c): one created here when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        yield None
        return
    name = f"sbx{secrets.token_hex(4)}"
    created = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], capture_output=True
    )
    if created.returncode != 0:
        pytest.skip(f"root, but useradd failed: {created.stderr.decode(errors='replace')}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def unprivileged_euid(user) -> int:
    return user.pw_uid if user is not None else os.geteuid()


@pytest.fixture(scope="module")
def workspace():
    directory = Path(tempfile.mkdtemp(prefix="swarmrl-attacks-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def host(workspace):
    """The validator's secrets, a listener, a victim process and the host paths attacks try to write."""
    marker = f"SWARMRL-SECRET-{secrets.token_hex(8)}"
    run_dir = workspace / f"run-{secrets.token_hex(4)}"
    (run_dir / "keys").mkdir(parents=True)
    (run_dir / "rollouts").mkdir()
    (run_dir / "keys" / "node.key").write_text(f"-----BEGIN PRIVATE KEY-----\n{marker}\n")
    (run_dir / "rollouts" / "step_3-node_other.parquet").write_text(f"PAR1 {marker}")
    (run_dir / "validator.toml").write_text(f'database_url = "postgresql://validator:{marker}@db/swarm"\n')
    for path in [run_dir, *run_dir.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    victim = subprocess.Popen(["sleep", "300"])
    targets = [str(run_dir / "escaped"), str(Path(__file__).resolve().parent / f"escaped-{marker}")]
    params = {
        "marker": marker,
        "targets": targets,
        "secret_paths": [str(p) for p in run_dir.rglob("*") if p.is_file()],
        "port": listener.getsockname()[1],
        "victim": victim.pid,
    }
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "SWARMRL_COORDINATOR_TOKEN": marker,
        "SWARMRL_DATABASE_URL": f"postgresql://validator:{marker}@db/swarm",
    }
    try:
        yield {"params": params, "env": env, "run_dir": run_dir, "listener": listener, "victim": victim}
    finally:
        victim.kill()
        victim.wait()
        listener.close()
        for target in targets:
            Path(target).unlink(missing_ok=True)


def run_driver(host, python: str, driver: Path, user=None, extra_env=None, only=None) -> dict:
    params = dict(host["params"], only=only) if only else host["params"]
    argv = [python, str(driver), json.dumps(params)]
    env = dict(host["env"], HOME=str(host["run_dir"]), **(extra_env or {}))
    if user is not None:
        argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", *argv]
    started = time.time()
    done = subprocess.run(argv, env=env, cwd=host["run_dir"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    uids = {user.pw_uid} if user is not None else set(PRIVATE_UIDS)
    assert not leftover_processes(uids, started), "sandbox processes outlived the run"
    for directory in ("/tmp", "/tmp/work", "/dev/shm", "/", "/root", "/usr", str(host["run_dir"])):
        assert not Path(directory, "fill").exists(), f"the disk-filling attack wrote {directory}/fill"
    return result


def leftover_processes(uids, since: float, wait_seconds: float = 3.0) -> list[int]:
    boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    ticks = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + wait_seconds
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
                started = boot + int((entry / "stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
            except (OSError, ValueError, IndexError):
                continue
            uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
            if uid in uids and started >= since - 1:
                found.append(int(entry.name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def assert_contained(host, result: dict, expected_euid: int) -> None:
    assert result["mode"] == "bwrap", f"isolation downgraded: {result['description']}"
    assert result["euid"] == expected_euid
    assert result["private_uid"] is (expected_euid == 0)
    escaped = {attack: reward for attack, reward in result["rewards"].items() if reward != 0.0}
    assert escaped == {}
    assert result["honest"] == 1.0, f"the grader no longer works after the attacks: {result['honest_detail']}"
    for target in host["params"]["targets"]:
        assert not Path(target).exists(), f"{target} was written from the sandbox"
    host["listener"].settimeout(0.2)
    with pytest.raises(TimeoutError):
        host["listener"].accept()
    assert host["victim"].poll() is None, "a process outside the sandbox was killed"


@pytest.mark.slow
def test_a_as_root_from_the_project_venv(host):
    if os.geteuid() != 0:
        pytest.skip("not root")
    src = str(SWARMRL_DIR.parent)
    result = run_driver(host, sys.executable, DRIVER, extra_env={"PYTHONPATH": src})
    assert_contained(host, result, expected_euid=0)
    assert result["cgroups"], "cgroup limits are available to root here but were not used"


@pytest.mark.slow
def test_b_as_an_unprivileged_user(host, sandbox_user, workspace):
    python = system_python()
    if python is None:
        pytest.skip("no interpreter with our ABI that other users can run")
    venv = workspace / f"venv-user-{secrets.token_hex(3)}"
    venv_python = self_contained_venv(python, venv)
    result = run_driver(host, venv_python, venv / DRIVER.name, user=sandbox_user)
    assert_contained(host, result, expected_euid=unprivileged_euid(sandbox_user))


@pytest.mark.slow
@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
def test_the_process_limit_holds_per_sandbox(host, sandbox_user, workspace, as_user):
    """RLIMIT_NPROC bounds each sandbox, and separately: three at once each get what one gets alone (as
    root: a private uid each; as a user: a user namespace each, counted on its own by the kernel)."""
    if not as_user and os.geteuid() != 0:
        pytest.skip("not root")
    python = system_python() if as_user else sys.executable
    if python is None:
        pytest.skip("no interpreter with our ABI that other users can run")
    venv = workspace / f"venv-forks-{secrets.token_hex(3)}"
    venv_python = self_contained_venv(python, venv)
    argv = [venv_python, str(venv / DRIVER.name), json.dumps({"count_forks": True})]
    if as_user and sandbox_user is not None:
        argv = [
            "setpriv",
            f"--reuid={sandbox_user.pw_uid}",
            f"--regid={sandbox_user.pw_gid}",
            "--init-groups",
            *argv,
        ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=host["run_dir"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mode"] == "bwrap"
    assert 0 < result["alone"] < result["limit"]
    assert result["together"] == [result["alone"]] * 3


@pytest.mark.slow
@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
def test_c_from_a_venv_inside_a_0700_directory(host, sandbox_user, workspace, as_user):
    if not as_user and os.geteuid() != 0:
        pytest.skip("not root")
    python = system_python() if as_user else os.path.realpath(sys.executable)
    if python is None:
        pytest.skip("no interpreter with our ABI that other users can run")
    private = workspace / f"private-{secrets.token_hex(3)}"
    private.mkdir(mode=0o700)
    venv_python = self_contained_venv(python, private / "venv")
    if as_user and sandbox_user is not None:
        os.chown(private, sandbox_user.pw_uid, sandbox_user.pw_gid)
    private.chmod(0o700)
    result = run_driver(
        host, venv_python, private / "venv" / DRIVER.name, user=sandbox_user if as_user else None
    )
    assert_contained(host, result, expected_euid=unprivileged_euid(sandbox_user) if as_user else 0)
    assert result["interpreter"] == python


@pytest.mark.slow
def test_without_os_isolation_the_same_attacks_get_out(host):
    """The control: with only the audit hook (isolation none) the harmless subset escapes, so the attacks
    above are real and it is bubblewrap that stops them."""
    result = run_driver(
        host,
        sys.executable,
        DRIVER,
        extra_env={"PYTHONPATH": str(SWARMRL_DIR.parent), "SWARMRL_ATTACK_UNSAFE": "1"},
        only=list(HARMLESS_WHEN_ESCAPED),
    )
    assert result["mode"] == "none"
    assert result["rewards"] == {attack: 1.0 for attack in HARMLESS_WHEN_ESCAPED}
    assert Path(host["params"]["targets"][0]).exists()
