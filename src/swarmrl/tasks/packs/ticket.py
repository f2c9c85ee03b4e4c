"""The proof-of-work ticket a pack submission carries (`swarmrl.tickets`): it binds the run, the pack's digest and
its author, so one ticket cannot be spent twice or on another pack."""

from __future__ import annotations

from swarmrl import tickets

DOMAIN = "swarmrl-pack-ticket/1"


def ticket_hash(run_id: str, digest: str, author: str, nonce: str) -> bytes:
    return tickets.ticket_hash(DOMAIN, (run_id, digest, author), nonce)


def ticket_ok(run_id: str, digest: str, author: str, nonce: str, bits: int) -> bool:
    return tickets.ticket_ok(DOMAIN, (run_id, digest, author), nonce, bits)


def solve_ticket(run_id: str, digest: str, author: str, bits: int) -> str:
    return tickets.solve_ticket(DOMAIN, (run_id, digest, author), bits)
