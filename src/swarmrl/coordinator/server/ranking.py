"""Which members a bounded view shows: ranked by what cannot be minted for free, never by the ids keys choose.

A node id is a public key, and keys can be ground for any prefix in seconds: a view ordered by id and cut at
`list_limit` shows whoever ground the smallest ids. Every bounded view of members (the nodes table, the relays
panel and SHARDCAST tree, `swarmrl status`, `GET /nodes`) ranks them in tiers instead:

0. the operator's: the run's trainer and validators, and the relays the operator named (`operator_relays`);
1. nodes with accepted work that are alive, most accepted files first;
2. banned nodes, shown as such, the latest bans first;
3. nodes with accepted work gone quiet (dead, left or ejected);
4. never-proven nodes that are alive;
5. never-proven nodes that are not.

Within a tier, the most accepted files first, then the earliest joined (a key cannot join in the past; any
key can heartbeat now). A view tells how many of each tier it
left out, so an operator reads "and 9,500 never-proven nodes not shown", not a table that looks complete.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.rules.health import dead_cutoff
from swarmrl.coordinator.store.db import Ban, Membership, RelayState, Run, Validator

TIER_NAMES = {
    0: "operator's",
    1: "proven",
    2: "banned",
    3: "quiet proven",
    4: "never-proven",
    5: "idle never-proven",
}


def _tier(run: Run, config: CoordinatorConfig, now: float):
    """The tier of a member row (Membership joined with its Ban, if any) as a SQL expression."""
    validators = select(Validator.public_key).where(Validator.run_id == run.run_id)
    operators = [Membership.node_id == run.trainer_public_key, Membership.node_id.in_(validators)]
    if config.operator_relays:
        operators.append(and_(Membership.role == "relay", Membership.node_id.in_(config.operator_relays)))
    proven = Membership.judged_accepted > 0
    alive = and_(Membership.status == "active", Membership.last_seen > dead_cutoff(now, config))
    return case(
        (or_(*operators), 0),
        (Ban.node_id.is_not(None), 2),
        (and_(proven, alive), 1),
        (proven, 3),
        (alive, 4),
        else_=5,
    )


def _ranked(run: Run, config: CoordinatorConfig, now: float, *where):
    tier = _tier(run, config, now).label("tier")
    query = (
        select(Membership, tier)
        .outerjoin(Ban, Ban.node_id == Membership.node_id)
        .where(Membership.run_id == run.run_id, *where)
    )
    return query, tier


@dataclass(frozen=True)
class Page:
    """The members a view shows, in rank order, and how many of each tier it left out (by tier name)."""

    members: list[Membership]
    left_out: dict[str, int]


def _page(session: Session, query, tier, limit: int) -> Page:
    rows = session.execute(
        query.order_by(
            tier,
            Membership.judged_accepted.desc(),
            Ban.banned_at.desc(),
            Membership.joined_at,
            Membership.node_id,
        ).limit(limit)
    ).all()
    shown: dict[int, int] = {}
    for _, rank in rows:
        shown[rank] = shown.get(rank, 0) + 1
    ranks = query.subquery()
    totals = session.execute(select(ranks.c.tier, func.count()).group_by(ranks.c.tier)).all()
    left_out = {
        TIER_NAMES[rank]: count - shown.get(rank, 0) for rank, count in totals if count > shown.get(rank, 0)
    }
    return Page(members=[member for member, _ in rows], left_out=left_out)


def ranked_members(session: Session, run: Run, config: CoordinatorConfig, now: float, limit: int) -> Page:
    """At most `limit` of the run's members, in rank order."""
    query, tier = _ranked(run, config, now)
    return _page(session, query, tier, limit)


def ranked_relays(session: Session, run: Run, config: CoordinatorConfig, now: float, limit: int) -> Page:
    """At most `limit` of the run's relays that reported, in rank order (the operator's first)."""
    reported = select(RelayState.node_id).where(RelayState.run_id == run.run_id)
    query, tier = _ranked(run, config, now, Membership.role == "relay", Membership.node_id.in_(reported))
    return _page(session, query, tier, limit)
