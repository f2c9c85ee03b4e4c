"""Whether peers on other machines can open a URL a server advertises.

A server bound to every interface (or a public address) that advertises a name resolving only to loopback —
Debian maps a machine's own hostname to 127.0.1.1 — is unreachable for every other machine, though it looks
fine from its own. Say so when it starts, not after a remote peer has timed out.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolved(host: str) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return set()


def loopback_warning(url: str, bound_host: str) -> str | None:
    """A warning when a server bound for other machines (`bound_host` not loopback) advertises `url` whose
    host resolves to loopback addresses only; None otherwise (a local server advertising loopback is fine)."""
    if is_loopback(bound_host):
        return None
    host = urlsplit(url).hostname or ""
    addresses = resolved(host)
    if not addresses or not all(is_loopback(address) for address in addresses):
        return None
    return (
        f"{url} is advertised, but {host} resolves to {', '.join(sorted(addresses))} (loopback): peers on other "
        "machines cannot reach it; advertise a URL with an address they reach (--advertise, or "
        "[shardcast] advertise_url / --origin-advertise for a trainer's origin)"
    )
