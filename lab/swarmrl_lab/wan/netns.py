"""Network namespaces, veth pairs, bridges, HTB rates and nftables DNAT, by iproute2's and nftables' own tools.

Every namespace a run creates is named `<tag>-<what>` with a tag unique to the run (`swan<pid>x<hex>`), so
runs side by side never collide, and what a killed run left behind can be found and removed by a later one
(`remove_orphans`: namespaces of a tag whose process is gone). Interfaces are created straight inside their
namespaces (`ip -n A link add X type veth peer name Y netns B`), so their names need only be unique there.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from swarmrl_lab.wan.errors import WanError, WanUnavailable

TAG_PREFIX = "swan"
_TAG = re.compile(rf"^({TAG_PREFIX}(\d+)x[0-9a-f]{{4}})-")
TOOLS = {"ip": "iproute2", "tc": "iproute2", "nft": "nftables"}
CLONE_NEWNET = 0x40000000
COMMAND_TIMEOUT_S = 20.0


def new_tag() -> str:
    return f"{TAG_PREFIX}{os.getpid()}x{secrets.token_hex(2)}"


def check_available() -> None:
    """Refuse (WanUnavailable, one line) a machine where the emulator cannot run: not root, or a tool missing."""
    if os.geteuid() != 0:
        raise WanUnavailable("the WAN emulator needs root (network namespaces, tc, nftables); run it as root")
    missing = sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        raise WanUnavailable(
            f"the WAN emulator needs {', '.join(missing)} (apt-get install -y {' '.join(missing)})"
        )


def run(*args: str, stdin: str | None = None) -> str:
    """Run one command of iproute2 or nftables; a failure raises WanError naming the command and its answer."""
    try:
        done = subprocess.run(
            args, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WanError(f"`{' '.join(args)}` could not run: {exc}") from exc
    if done.returncode != 0:
        raise WanError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def namespaces() -> list[str]:
    listed = run("ip", "netns", "list")
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def add_namespace(name: str) -> None:
    run("ip", "netns", "add", name)
    run("ip", "-n", name, "link", "set", "lo", "up")


def delete_namespaces(prefix: str) -> list[str]:
    """Delete every namespace named `prefix…` (with them go their veths and bridges); returns their names."""
    gone = [name for name in namespaces() if name.startswith(prefix)]
    for name in gone:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT_S)
    return gone


def remove_orphans() -> list[str]:
    """Namespaces an emulator run left behind when it was killed (its process is gone): deleted."""
    gone: list[str] = []
    for tag in {
        m.group(1) for name in namespaces() if (m := _TAG.match(name)) and not _alive(int(m.group(2)))
    }:
        gone += delete_namespaces(f"{tag}-")
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def veth(ns_a: str, dev_a: str, ns_b: str, dev_b: str) -> None:
    """A veth pair with one end in each namespace."""
    run("ip", "-n", ns_a, "link", "add", dev_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)


def bridge(ns: str, dev: str, address: str) -> None:
    run("ip", "-n", ns, "link", "add", dev, "type", "bridge")
    run("ip", "-n", ns, "addr", "add", address, "dev", dev)
    run("ip", "-n", ns, "link", "set", dev, "up")


def attach(ns: str, dev: str, bridge_dev: str) -> None:
    run("ip", "-n", ns, "link", "set", dev, "master", bridge_dev)
    run("ip", "-n", ns, "link", "set", dev, "up")


def address(ns: str, dev: str, cidr: str) -> None:
    run("ip", "-n", ns, "addr", "add", cidr, "dev", dev)
    run("ip", "-n", ns, "link", "set", dev, "up")


def route(ns: str, destination: str, via: str) -> None:
    run("ip", "-n", ns, "route", "add", destination, "via", via)


def forward(ns: str) -> None:
    run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")


def rate_limit(ns: str, dev: str, mbit: float) -> None:
    """Cap what leaves `dev` at `mbit` Mbit/s (HTB, one class). Every veth end is shaped on its way out, so
    a machine's downlink is the egress of its peer: no ingress shaping (IFB) is needed."""
    rate = f"{mbit * 1000:.0f}kbit"
    # A burst of ~5 ms at the rate (at least 64 KiB: veths hand HTB segments of up to 64 KiB).
    burst = str(max(64 * 1024, int(mbit * 1e6 / 8 * 0.005)))
    run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
    run(
        "tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
        "rate", rate, "ceil", rate, "burst", burst, "cburst", burst, "quantum", "65536",
    )  # fmt: skip


def dnat(ns: str, rules: list[tuple[str, int, str, int]]) -> None:
    """Redirect connections this namespace opens to (virtual address, port) to (address, port) instead."""
    lines = [
        "table ip wan {",
        "  chain out {",
        "    type nat hook output priority -100; policy accept;",
        *(f"    ip daddr {vip} tcp dport {port} dnat to {to}:{to_port}" for vip, port, to, to_port in rules),
        "  }",
        "}",
    ]
    run("ip", "netns", "exec", ns, "nft", "-f", "-", stdin="\n".join(lines) + "\n")


def redirect_to_paths(ns: str, lan: str, rules: list[tuple[str, int]]) -> None:
    """Connections routed in from `lan` to a subnet of `rules` go to this namespace's port for that subnet
    instead (REDIRECT: the listener reads the original destination with SO_ORIGINAL_DST)."""
    lines = [
        "table ip wanpaths {",
        "  chain pre {",
        "    type nat hook prerouting priority -100; policy accept;",
        *(
            f'    iifname "{lan}" ip daddr {subnet} meta l4proto tcp redirect to :{port}'
            for subnet, port in rules
        ),
        "  }",
        "}",
    ]
    run("ip", "netns", "exec", ns, "nft", "-f", "-", stdin="\n".join(lines) + "\n")


def exec_prefix(ns: str) -> list[str]:
    """The command prefix that runs a program inside namespace `ns` (`ip netns exec` execs it: same PID)."""
    return ["ip", "netns", "exec", ns]


@contextmanager
def entered(ns: str) -> Iterator[None]:
    """Run the calling thread inside namespace `ns` (sockets it opens live there) and come back after.
    Python 3.11 has no os.setns; libc's setns(2) is called directly."""
    libc = ctypes.CDLL(None, use_errno=True)

    def switch(fd: int) -> None:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise WanError(f"setns into {ns}: {os.strerror(ctypes.get_errno())}")

    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{ns}") as there:
        switch(there.fileno())
        try:
            yield
        finally:
            switch(home.fileno())
