"""Proof-of-work tickets (hashcash): a nonce such that SHA-256 over a domain, the values the ticket binds and the
nonce starts with `bits` zero bits.

Keys are free, so a queue open to every key is captured by whoever makes the most of them; a ticket makes each
place in it cost about 2^bits hash evaluations instead, whatever the number of keys. What it binds (a run, a
pack, a node, a challenge) decides where it may be spent, so one ticket is never spent twice. Checking one is a
single hash; solving one, about 2^bits.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence

MAX_NONCE_CHARS = 32
SEPARATOR = "\x1f"


def _prefix(domain: str, bound: Sequence[str]) -> bytes:
    return SEPARATOR.join((domain, *bound, "")).encode()


def ticket_hash(domain: str, bound: Sequence[str], nonce: str) -> bytes:
    return hashlib.sha256(_prefix(domain, bound) + nonce.encode()).digest()


def leading_zero_bits(value: bytes) -> int:
    bits = 0
    for byte in value:
        if byte:
            return bits + 8 - byte.bit_length()
        bits += 8
    return bits


def ticket_ok(domain: str, bound: Sequence[str], nonce: str, bits: int) -> bool:
    if not 0 < len(nonce) <= MAX_NONCE_CHARS or not nonce.isalnum() or not nonce.isascii():
        return False
    return leading_zero_bits(ticket_hash(domain, bound, nonce)) >= bits


def solve_ticket(domain: str, bound: Sequence[str], bits: int) -> str:
    """The first nonce (hex counter) whose ticket has `bits` leading zero bits: about 2^bits hashes."""
    prefix = _prefix(domain, bound)
    for counter in itertools.count():
        nonce = format(counter, "x")
        if leading_zero_bits(hashlib.sha256(prefix + nonce.encode()).digest()) >= bits:
            return nonce
    raise AssertionError("unreachable")
