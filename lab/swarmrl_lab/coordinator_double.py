"""Real processes for tests and local swarms: a coordinator subprocess and a throw-away Postgres server."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.httpserve.guard import ConnectionGuard

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


class ProcessStartError(Exception):
    """A helper process did not come up in time; carries its captured output."""


@dataclass
class CoordinatorProcess:
    process: subprocess.Popen
    url: str
    port: int

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _wait_for_file(path: Path, process: subprocess.Popen, timeout_s: float, log: Path) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    process.wait(timeout=10)
    raise ProcessStartError(f"coordinator did not start: {log.read_text()[-4000:] if log.exists() else ''}")


def start_coordinator(
    workdir: Path,
    *,
    db_url: str | None = None,
    admin_token: str = "admin-secret",
    config: CoordinatorConfig | None = None,
    timeout_s: float = 60.0,
) -> CoordinatorProcess:
    """Start `swarmrl.coordinator.cli` on 127.0.0.1, port 0; returns once it listens. Caller must `kill()`."""
    workdir.mkdir(parents=True, exist_ok=True)
    port_file = workdir / "port"
    port_file.unlink(missing_ok=True)
    config_file = workdir / "coordinator.toml"
    config_file.write_text(_toml((config or CoordinatorConfig()).model_dump(mode="json", exclude_none=True)))
    log = workdir / "coordinator.log"
    command = [
        sys.executable,
        "-m",
        "swarmrl.coordinator.cli",
        "--db-url",
        db_url or f"sqlite:///{workdir / 'coordinator.db'}",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--storage-dir",
        str(workdir / "storage"),
        "--config",
        str(config_file),
        "--port-file",
        str(port_file),
    ]
    env = {**os.environ, "SWARMRL_ADMIN_TOKEN": admin_token}
    with open(log, "ab") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    port = int(_wait_for_file(port_file, process, timeout_s, log))
    url = f"http://127.0.0.1:{port}"
    _wait_until_serving(url, process, timeout_s)
    return CoordinatorProcess(process=process, url=url, port=port)


def _wait_until_serving(url: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise ProcessStartError(f"coordinator at {url} never answered /healthz")


def _toml(data: dict) -> str:
    """Flat TOML for a CoordinatorConfig dump (scalars plus one table of strings)."""
    lines, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append(
                f"[{key}]\n" + "".join(f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in value.items())
            )
        else:
            lines.append(f"{key} = {json.dumps(value)}\n")
    return "".join(lines) + "\n".join(tables)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def postgres_available() -> bool:
    return (POSTGRES_BIN / "initdb").exists() and (POSTGRES_BIN / "pg_ctl").exists()


def _unprivileged_user() -> str | None:
    """Postgres refuses to run as root; run it as `nobody` then (None: already non-root)."""
    if os.geteuid() != 0:
        return None
    pwd.getpwnam("nobody")
    return "nobody"


def _postgres_tool(
    user: str | None, root: Path, timeout_s: float, args: list[str], check: bool = True
) -> None:
    """Run one of the server's binaries (`args[0]`: initdb, pg_ctl, createdb) as `user`, in `root`."""
    command = [str(POSTGRES_BIN / args[0]), *args[1:]]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    subprocess.run(command, check=check, capture_output=True, timeout=timeout_s, cwd=root)


def _postgres_root(user: str | None) -> Path:
    """A fresh temp directory with a `sock/` folder for the server's Unix socket, owned by `user`."""
    root = Path(tempfile.mkdtemp(prefix="swarmrl-pg-"))
    (root / "sock").mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chmod(root, 0o755)
        for path in (root, root / "sock"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    return root


@contextmanager
def postgres_server(timeout_s: float = 60.0) -> Iterator[str]:
    """initdb + pg_ctl into a temp dir, 127.0.0.1 only, a free port; yields a psycopg URL; stops it after."""
    if not postgres_available():
        raise ProcessStartError(f"postgres binaries not found under {POSTGRES_BIN}")
    user = _unprivileged_user()
    root = _postgres_root(user)
    data, log, port = root / "data", root / "postgres.log", free_port()
    options = f"-h 127.0.0.1 -p {port} -k {root / 'sock'} -c fsync=off -c full_page_writes=off"
    started = False
    try:
        initdb = ["initdb", "-D", str(data), "-U", "swarmrl", "--auth=trust", "--no-sync", "-E", "UTF8"]
        _postgres_tool(user, root, timeout_s, initdb)
        wait = str(int(timeout_s))
        start = ["pg_ctl", "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", wait, "start"]
        _postgres_tool(user, root, timeout_s, start)
        started = True
        createdb = ["createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "swarmrl", "swarmrl"]
        _postgres_tool(user, root, timeout_s, createdb)
        yield f"postgresql+psycopg://swarmrl@127.0.0.1:{port}/swarmrl"
    except subprocess.CalledProcessError as exc:
        raise ProcessStartError(
            f"postgres failed: {exc.stderr.decode()[-2000:]}{log.read_text()[-2000:] if log.exists() else ''}"
        ) from exc
    finally:
        if started:
            _stop_postgres(user, data, root)
        shutil.rmtree(root, ignore_errors=True)


def _stop_postgres(user: str | None, data: Path, root: Path) -> None:
    try:
        _postgres_tool(
            user, root, 30, ["pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"], check=False
        )
    except subprocess.TimeoutExpired:
        pid_file = data / "postmaster.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)


@dataclass
class ThreadedServer:
    """The app served by uvicorn in a thread of this process (for tests that inject a clock)."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def serve_in_thread(app: FastAPI, timeout_s: float = 30.0) -> ThreadedServer:
    """The app served by plain uvicorn in a thread of this process."""
    return _serve(uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)), timeout_s)


def serve_guarded_in_thread(
    app: FastAPI, limits: ConnectionLimits | None = None, timeout_s: float = 30.0
) -> tuple[ThreadedServer, ConnectionGuard]:
    """The app behind its real connection guard (as `swarmrl coordinator` serves it), in a thread of this
    process; returns the server (`stop()`) and the guard."""
    from swarmrl.coordinator.server.listen import build_server

    server, guard = build_server(app, limits)
    return _serve(server, timeout_s), guard


def _serve(server: uvicorn.Server, timeout_s: float) -> ThreadedServer:
    from swarmrl.httpserve.uvicorn_config import bind

    sock = bind("127.0.0.1", 0)
    sock.listen(2048)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise ProcessStartError("in-thread coordinator did not start")
        time.sleep(0.02)
    return ThreadedServer(url=f"http://127.0.0.1:{sock.getsockname()[1]}", server=server, thread=thread)


class FakeClock:
    """A settable clock for `create_app(clock=...)`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


POSTGRES_SKIP_REASON = (
    f"postgres binaries absent ({POSTGRES_BIN}/initdb, pg_ctl): install the Debian 'postgresql' package"
)


@contextmanager
def coordinator_backend(
    kind: str, workdir: Path, *, config: CoordinatorConfig | None = None, admin_token: str = "admin-secret"
) -> Iterator[CoordinatorProcess]:
    """A coordinator process on a fresh SQLite file (`kind="sqlite"`) or a fresh Postgres server ("postgres")."""
    if kind == "sqlite":
        process = start_coordinator(workdir, config=config, admin_token=admin_token)
        try:
            yield process
        finally:
            process.kill()
        return
    if kind != "postgres":
        raise ValueError(f"unknown backend {kind!r}")
    with postgres_server() as db_url:
        process = start_coordinator(workdir, db_url=db_url, config=config, admin_token=admin_token)
        try:
            yield process
        finally:
            process.kill()


# What the lease tests start from: rate limits out of the way, and the open step alone (8 units and 1 of slack)
# unless a test leases ahead (each leasable step has its own unproven pool).
LEASE_TESTS = dict(
    uploads_per_hour=10_000,
    requests_per_minute=100_000,
    default_step_units=8,
    lease_slack_units=1,
    lease_ahead_steps=0,
)


def refusal(call) -> CoordinatorError:
    """The coordinator's refusal of `call()`; AssertionError if it was answered."""
    try:
        call()
    except CoordinatorError as exc:
        return exc
    raise AssertionError("not refused")


def leased_submit(client, run_id: str, data: bytes, *, rows: int = 1, tokens: int = 1):
    """What a well-behaved node does for one file: lease a unit (or take the first it holds; with a pool ticket
    when the coordinator asks for one, as a worker does), upload `data` as that unit's file and submit it.
    Returns the SubmissionInfo."""
    try:
        lease = client.lease_work(run_id, max_units=1)
    except CoordinatorError as exc:
        if exc.kind != "pool_ticket_needed":
            raise
        lease = client.lease_work(run_id, max_units=1, pool_ticket=client.solve_pool_ticket(run_id))
    unit = lease.units[0]
    return client.upload_and_submit(run_id, unit.step, unit.batch_index, data, rows, tokens)


class ClockedCoordinator:
    """One run ("r") on an in-process coordinator whose clock the test moves: admin, trainer, a validator, and
    nodes on demand. `close()` stops the server."""

    ADMIN = "admin-secret"

    def __init__(self, workdir: Path, config: CoordinatorConfig | None = None, run_id: str = "r") -> None:
        from swarmrl.coordinator.server.app import create_app
        from swarmrl.identity import Identity

        workdir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.contract = ContractSection()
        self.clock = FakeClock()
        self.storage = workdir / "store"
        self.app = create_app(
            db_url=f"sqlite:///{workdir / 'c.db'}",
            storage=self.storage,
            admin_token=self.ADMIN,
            config=config,
            clock=self.clock,
        )
        self.server = serve_in_thread(self.app)
        self.url = self.server.url
        from swarmrl.coordinator.client import AdminClient, TrainerClient, ValidatorClient

        self.admin = self.as_(AdminClient, admin_token=self.ADMIN)
        self.trainer = self.as_(TrainerClient, Identity.generate())
        self.validator = self.as_(ValidatorClient, Identity.generate())
        # Tests claim whatever rows and tokens they like: the run's claims are not bounded by its contract.
        self.admin.create_run(run_id, self.trainer.node_id, self.contract, bound_claims=False)
        self.admin.add_validator(run_id, self.validator.node_id)

    def client(self, identity=None, **kw):
        from swarmrl.coordinator.client import NodeClient

        return self.as_(NodeClient, identity, **kw)

    def as_(self, role, identity=None, **kw):
        """A client of `role` (a client class) signing with `identity`, on the world's fake clock, no retries."""
        from swarmrl.retry import NO_RETRY

        return role.at(self.url, identity, clock=self.clock, retry=NO_RETRY, **kw)

    def node(self, role: str = "worker", identity=None):
        """A registered member of the run (a worker, or a relay), under `identity` or a new one."""
        from swarmrl.identity import Identity

        node = self.client(identity or Identity.generate())
        node.register()
        node.join(self.run_id, self.contract, role=role)
        return node

    def added_validator(self):
        from swarmrl.coordinator.client import ValidatorClient
        from swarmrl.identity import Identity

        validator = self.as_(ValidatorClient, Identity.generate())
        self.admin.add_validator(self.run_id, validator.node_id)
        return validator

    def wait(self, seconds: float, *nodes) -> None:
        """Let `seconds` pass on the service's clock while `nodes` keep heartbeating."""
        while seconds > 0:
            step = min(seconds, 9.0)
            self.clock.advance(step)
            seconds -= step
            for node in nodes:
                node.heartbeat(self.run_id)

    def close(self) -> None:
        self.server.stop()
        self.app.state.engine.dispose()


def accept(validator, submission, **verdict):
    """A validator accepting a file it measured to hold what its node claimed (the honest files of tests)."""
    return validator.post_verdict(
        submission.id, accept=True, check="all", rows=submission.rows, tokens=submission.tokens, **verdict
    )
