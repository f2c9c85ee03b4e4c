"""The unproven pool's admission ticket: while the pool is contested, each unit of it costs a proof of work.

Identities are free, so a fair lottery among the keys that want the pool's units is won by whoever makes the
most keys: a hundred fresh keys, each holding a unit to its deadline before its one lapse refuses it, keep an
honest newcomer waiting for minutes. While one of the pool's units lapsed or was rejected within
`lease_pool_ticket_window_s` (the pool is contested), a node without accepted work gets a unit of it only with a
ticket (`swarmrl.tickets`) of `lease_pool_ticket_bits`: a squatter then pays about 2^bits hashes for each unit it
holds, however many keys it has, and an honest newcomer pays it once. While nobody abuses the pool it is free.

A ticket binds the run, the node and a challenge: the current period (it and the next) and the number of units
the node was ever leased in the run, so it buys one unit, and cannot be stocked up ahead of an attack.
"""

from __future__ import annotations

import math

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import POOL_TICKET_DOMAIN, PoolTicket, PoolTicketChallenge, pool_ticket_bound
from swarmrl.coordinator.rules.leases import UNPROVEN, nodes_below, trust_tier
from swarmrl.coordinator.store.db import Membership, WorkUnit
from swarmrl.tickets import ticket_ok


def contested(session: Session, run_id: str, config: CoordinatorConfig, now: float) -> bool:
    """A unit of a node without accepted work lapsed or was rejected within the window (a unit's deadline is the
    latest it could have ended by lapsing, so its window starts there)."""
    if config.lease_pool_ticket_bits == 0 or config.lease_proven_files == 0:
        return False
    failed = session.scalar(
        select(WorkUnit.id)
        .where(
            WorkUnit.run_id == run_id,
            WorkUnit.status.in_(("expired", "rejected")),
            WorkUnit.expires_at >= now - config.lease_pool_ticket_window_s,
            WorkUnit.node_id.in_(nodes_below(run_id, config.lease_proven_files)),
        )
        .limit(1)
    )
    return failed is not None


def period(now: float, config: CoordinatorConfig) -> int:
    return math.floor(now / config.lease_pool_ticket_window_s)


def units_ever_leased(session: Session, run_id: str, node_id: str) -> int:
    query = select(func.count()).select_from(WorkUnit)
    return session.scalar(query.where(WorkUnit.run_id == run_id, WorkUnit.node_id == node_id)) or 0


def challenge(
    session: Session, member: Membership, config: CoordinatorConfig, now: float
) -> PoolTicketChallenge:
    """What the member's ticket for its next pool unit binds, and whether that unit needs one now."""
    leased = units_ever_leased(session, member.run_id, member.node_id)
    return PoolTicketChallenge(
        challenge=f"{period(now, config)}-{leased}",
        bits=config.lease_pool_ticket_bits,
        required=trust_tier(member, config) == UNPROVEN and contested(session, member.run_id, config, now),
    )


def ticket_problem(
    session: Session,
    run_id: str,
    node_id: str,
    ticket: PoolTicket | None,
    config: CoordinatorConfig,
    now: float,
) -> str | None:
    """Why the node's ticket does not buy it a pool unit now (None: it does)."""
    if ticket is None:
        return "no ticket"
    issued, _, leased = ticket.challenge.partition("-")
    current = period(now, config)
    if int(issued) not in (current, current - 1):
        return f"its challenge is from period {int(issued)}, no longer good"
    if int(leased) != units_ever_leased(session, run_id, node_id):
        return "its challenge was for a unit this node has since been leased"
    bound = pool_ticket_bound(run_id, node_id, ticket.challenge)
    if not ticket_ok(POOL_TICKET_DOMAIN, bound, ticket.nonce, config.lease_pool_ticket_bits):
        return f"its hash does not have {config.lease_pool_ticket_bits} leading zero bits"
    return None
