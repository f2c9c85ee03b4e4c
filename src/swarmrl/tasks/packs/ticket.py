"""The proof-of-work ticket a pack submission carries: a nonce such that SHA-256 over (run, pack digest, author,
nonce) starts with `bits` zero bits.

Keys are free, so a queue open to every key is captured by whoever makes the most of them; a ticket makes each
place in it cost about 2^bits hash evaluations instead, whatever the number of keys. It binds the run, the pack
and its author, so one ticket cannot be spent twice or on another pack. Checking one is a single hash.
"""

from __future__ import annotations

import hashlib
import itertools

DOMAIN = "swarmrl-pack-ticket/1"
MAX_NONCE_CHARS = 32


def ticket_hash(run_id: str, digest: str, author: str, nonce: str) -> bytes:
    return hashlib.sha256(f"{DOMAIN}\x1f{run_id}\x1f{digest}\x1f{author}\x1f{nonce}".encode()).digest()


def leading_zero_bits(value: bytes) -> int:
    bits = 0
    for byte in value:
        if byte:
            return bits + 8 - byte.bit_length()
        bits += 8
    return bits


def ticket_ok(run_id: str, digest: str, author: str, nonce: str, bits: int) -> bool:
    if not 0 < len(nonce) <= MAX_NONCE_CHARS or not nonce.isalnum() or not nonce.isascii():
        return False
    return leading_zero_bits(ticket_hash(run_id, digest, author, nonce)) >= bits


def solve_ticket(run_id: str, digest: str, author: str, bits: int) -> str:
    """The first nonce (hex counter) whose ticket has `bits` leading zero bits: about 2^bits hashes."""
    prefix = f"{DOMAIN}\x1f{run_id}\x1f{digest}\x1f{author}\x1f".encode()
    for counter in itertools.count():
        nonce = format(counter, "x")
        if leading_zero_bits(hashlib.sha256(prefix + nonce.encode()).digest()) >= bits:
            return nonce
    raise AssertionError("unreachable")
