"""One read of a run for `/dashboard` and `swarmrl status`: the counts the read endpoints give, in one place.

Reuses the per-node and per-step counts of `stats` and the ledger's balances rather than counting again; adds
what only a dashboard wants: the reward curve (the validators' trusted per-file means, by step), rejections
by check, the validator backlog and the step rate; and what nodes report for it alone: the trainer's held-out
evals and island merges (its metrics, by step) and the relays' last reports (their place in the SHARDCAST tree).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from typing import cast

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import (
    EVAL_PREFIX,
    ISLANDS_PREFIX,
    REWARDS_PREFIX,
    LedgerBalance,
    MemberInfo,
    MetricPoint,
    NodeRole,
    NodeSummary,
    NodeWork,
    RelaySummary,
    RunSummary,
    StepPoint,
    ValidatorBacklog,
    ValidatorSummary,
)
from swarmrl.coordinator.rules import ledger
from swarmrl.coordinator.rules.leases import expire_lapsed
from swarmrl.coordinator.server.ranking import ranked_members, ranked_relays
from swarmrl.coordinator.server.routes.trainer import current_state
from swarmrl.coordinator.server.stats import node_work, step_work
from swarmrl.coordinator.server.views import member_info
from swarmrl.coordinator.store.db import (
    Ban,
    Membership,
    Node,
    RelayState,
    Run,
    Submission,
    TrainerMetrics,
    Validator,
    Verdict,
)
from swarmrl.coordinator.store.db import Step as StepRow

CURVE_STEPS = 200  # the reward curve and the step list cover this many recent steps (bounded work per read)
RATE_STEPS = 10  # steps per minute over the most recent this many step intervals


def steps_per_minute(published_at: list[float]) -> float | None:
    """Rate over the last RATE_STEPS intervals between publications (None below two steps or no time)."""
    recent = published_at[-(RATE_STEPS + 1) :]
    if len(recent) < 2 or recent[-1] <= recent[0]:
        return None
    return 60.0 * (len(recent) - 1) / (recent[-1] - recent[0])


def mean_rewards(rows: list[tuple[int, dict]]) -> dict[int, tuple[float, int]]:
    """step → (row-weighted mean reward, rows) over verdict summaries that carry a numeric mean and rows."""
    total: dict[int, float] = defaultdict(float)
    count: dict[int, int] = defaultdict(int)
    for step, summary in rows:
        mean, n = (summary or {}).get("mean_reward"), (summary or {}).get("rows")
        if isinstance(mean, int | float) and isinstance(n, int) and n > 0:
            total[step] += mean * n
            count[step] += n
    return {step: (total[step] / count[step], count[step]) for step in count}


def _steps(session: Session, run: Run) -> list[StepPoint]:
    first = max(0, run.current_step - CURVE_STEPS + 1)
    published = list(
        session.scalars(
            select(StepRow).where(StepRow.run_id == run.run_id, StepRow.step >= first).order_by(StepRow.step)
        )
    )
    judged = session.execute(
        select(Submission.step, Verdict.rewards_summary)
        .join(Verdict, Verdict.submission_id == Submission.id)
        .where(Submission.run_id == run.run_id, Submission.step >= first, Verdict.accepted.is_(True))
    ).all()
    rewards = mean_rewards([(step, summary) for step, summary in judged])
    return [
        StepPoint(
            step=row.step,
            published_at=row.published_at,
            manifest_sha256=row.manifest_sha256,
            mean_reward=rewards.get(row.step, (None, 0))[0],
            rows=rewards.get(row.step, (None, 0))[1],
        )
        for row in published
    ]


def metric_curve(session: Session, run: Run, prefix: str) -> list[MetricPoint]:
    """The trainer's figures named `prefix`... of the last CURVE_STEPS policy steps, steps without any left out."""
    first = max(0, run.current_step - CURVE_STEPS + 1)
    rows = session.scalars(
        select(TrainerMetrics)
        .where(TrainerMetrics.run_id == run.run_id, TrainerMetrics.step >= first)
        .order_by(TrainerMetrics.step)
    )
    points = [
        MetricPoint(step=row.step, metrics={k: v for k, v in row.metrics.items() if k.startswith(prefix)})
        for row in rows
    ]
    return [p for p in points if p.metrics]


def relay_reports(session: Session, run_id: str, node_ids: list[str]) -> dict[str, RelayState]:
    """node id → the last relay report of each of `node_ids` that sent one."""
    rows = session.scalars(
        select(RelayState).where(RelayState.run_id == run_id, RelayState.node_id.in_(node_ids))
    )
    return {r.node_id: r for r in rows}


def rejections_by_node(session: Session, run_id: str) -> dict[str, Counter]:
    """node id → check → files of the node it rejected."""
    out: dict[str, Counter] = defaultdict(Counter)
    rows = session.execute(
        select(Submission.node_id, Verdict.check_name, func.count())
        .join(Verdict, Verdict.submission_id == Submission.id)
        .where(Submission.run_id == run_id, Verdict.accepted.is_(False))
        .group_by(Submission.node_id, Verdict.check_name)
    )
    for node, check, count in rows:
        out[node][check] += count
    return out


def declared_devices(session: Session, node_ids: list[str]) -> dict[str, str]:
    """node id → the device it declared at registration (nodes that declared none are left out)."""
    rows = session.execute(select(Node.node_id, Node.hardware).where(Node.node_id.in_(node_ids)))
    return {
        node_id: hardware["device"]
        for node_id, hardware in rows
        if isinstance(hardware, dict) and isinstance(hardware.get("device"), str)
    }


def validator_backlog(session: Session, run_id: str, now: float) -> ValidatorBacklog:
    pending = Submission.run_id == run_id, Submission.status == "pending"
    live = (*pending, Submission.judge_key.is_not(None), Submission.judge_until > now)
    holding = dict(
        session.execute(
            select(Submission.judge_key, func.count()).where(*live).group_by(Submission.judge_key)
        ).all()
    )
    verdicts = {
        key: (count, rejected, last)
        for key, count, rejected, last in session.execute(
            select(
                Verdict.validator_key,
                func.count(),
                func.coalesce(func.sum(case((Verdict.accepted.is_(False), 1), else_=0)), 0),
                func.max(Verdict.decided_at),
            )
            .join(Submission, Submission.id == Verdict.submission_id)
            .where(Submission.run_id == run_id)
            .group_by(Verdict.validator_key)
        )
    }
    keys = list(
        session.scalars(
            select(Validator.public_key).where(Validator.run_id == run_id).order_by(Validator.added_at)
        )
    )
    devices = declared_devices(session, keys)
    validators = [
        ValidatorSummary(
            node_id=key,
            verdicts=verdicts.get(key, (0, 0, None))[0],
            rejected=int(verdicts.get(key, (0, 0, None))[1]),
            judging=holding.get(key, 0),
            last_verdict_at=verdicts.get(key, (0, 0, None))[2],
            device=devices.get(key),
        )
        for key in keys
    ]
    return ValidatorBacklog(
        pending=session.scalar(select(func.count()).select_from(Submission).where(*pending)) or 0,
        judging=sum(holding.values()),
        validators=validators,
    )


def place_relays(relays: list[RelaySummary]) -> list[RelaySummary]:
    """Each relay once in the SHARDCAST tree, in linear time over what relays claim: a breadth-first walk from the
    origins (upstreams no reporting relay serves), each URL and each relay visited once, hangs a relay under the
    first of its upstreams the walk reaches. Relays reachable only through a cycle of claims stay unplaced
    (parent None). Returns placed relays in walk order (a parent before its children), then the unplaced."""
    naming: dict[str, list[RelaySummary]] = defaultdict(list)  # upstream URL → relays that claim to mirror it
    for relay in relays:
        for url in dict.fromkeys(relay.upstreams):
            naming[url].append(relay)
    served = {relay.url for relay in relays}
    queue = deque((url, 0) for url in sorted(naming) if url not in served)
    seen_urls = {url for url, _ in queue}
    placed: dict[str, RelaySummary] = {}
    while queue:
        url, depth = queue.popleft()
        for relay in naming.get(url, ()):
            if relay.node_id in placed:
                continue
            relay.parent, relay.depth = url, depth + 1
            placed[relay.node_id] = relay
            if relay.url not in seen_urls:
                seen_urls.add(relay.url)
                queue.append((relay.url, depth + 1))
    unplaced = sorted((r for r in relays if r.node_id not in placed), key=lambda r: r.node_id)
    return [*placed.values(), *unplaced]


@dataclass
class MemberFacts:
    """What the nodes table shows beyond membership, read once for a page of members."""

    works: dict[str, NodeWork]
    balances: dict[str, LedgerBalance]
    banned: set[str]
    validators: set[str]
    rejections: dict[str, Counter]
    devices: dict[str, str]
    reports: dict[str, RelayState]

    @classmethod
    def read(cls, session: Session, run_id: str, ids: list[str]) -> MemberFacts:
        return cls(
            works={w.node_id: w for w in node_work(session, run_id, node_ids=ids, limit=len(ids))},
            balances={b.node_id: b for b in ledger.balances(session, run_id, node_ids=ids)},
            banned=set(session.scalars(select(Ban.node_id).where(Ban.node_id.in_(ids)))),
            validators=set(session.scalars(select(Validator.public_key).where(Validator.run_id == run_id))),
            rejections=rejections_by_node(session, run_id),
            devices=declared_devices(session, ids),
            reports=relay_reports(session, run_id, ids),
        )


def node_summary(member: Membership, run: Run, facts: MemberFacts, info: MemberInfo) -> NodeSummary:
    node = member.node_id
    work = facts.works.get(node) or NodeWork(node_id=node)
    balance = facts.balances.get(node) or LedgerBalance(node_id=node)
    role = "validator" if node in facts.validators else member.role
    return NodeSummary(
        node_id=node,
        role=cast(NodeRole, "trainer" if node == run.trainer_public_key else role),  # the roles rows hold
        status=info.status,
        health=info.health,
        last_seen=info.last_seen,
        policy_step=info.policy_step,
        held=work.held,
        accepted=work.accepted,
        rejected=work.rejected,
        pending=work.generated - work.accepted - work.rejected - work.voided,
        voided=work.voided,
        trained=work.trained,
        credit_tokens=balance.pending_tokens + balance.unlocked_tokens,
        wiped_tokens=balance.wiped_tokens,
        banned=node in facts.banned,
        rejections=dict(facts.rejections.get(node, {})),
        device=facts.devices.get(node),
    )


@dataclass
class MembersView:
    """The nodes table, the relays with their last report, what each left out, and rejections by check."""

    nodes: list[NodeSummary]
    relays: list[RelaySummary]
    nodes_left_out: dict[str, int]
    relays_left_out: dict[str, int]
    rejections: dict[str, int]


def members_view(session: Session, run: Run, config: CoordinatorConfig, now: float) -> MembersView:
    """At most `list_limit` members and as many reporting relays, each list ranked by what cannot be minted
    for free (`ranking`), never by node id."""
    members = ranked_members(session, run, config, now, config.list_limit)
    relays = ranked_relays(session, run, config, now, config.list_limit)
    ids = list(dict.fromkeys(m.node_id for m in (*members.members, *relays.members)))
    facts = MemberFacts.read(session, run.run_id, ids)
    operator = set(config.operator_relays)
    placed = [
        RelaySummary(
            **facts.reports[member.node_id].report,
            node_id=member.node_id,
            health=member_info(member, now, config).health,
            reported_at=facts.reports[member.node_id].reported_at,
            operator=member.node_id in operator,
        )
        for member in relays.members
    ]
    nodes = [node_summary(m, run, facts, member_info(m, now, config)) for m in members.members]
    total: Counter = Counter()
    for checks in facts.rejections.values():
        total.update(checks)
    return MembersView(
        nodes=nodes,
        relays=place_relays(placed),
        nodes_left_out=members.left_out,
        relays_left_out=relays.left_out,
        rejections=dict(total),
    )


def run_summary(session: Session, run: Run, config: CoordinatorConfig, now: float) -> RunSummary:
    """Call inside a transaction: lapsed units are expired first, as every read of unit counts does."""
    run_id = run.run_id
    expire_lapsed(session, run_id, config, now)
    view = members_view(session, run, config, now)
    steps = _steps(session, run)
    by_status = dict(
        session.execute(
            select(Submission.status, func.count())
            .where(Submission.run_id == run_id)
            .group_by(Submission.status)
        ).all()
    )
    return RunSummary(
        run=current_state(session, run, config, now),
        generated_at=now,
        steps_per_minute=steps_per_minute([s.published_at for s in steps]),
        steps=steps,
        open_step=step_work(session, run, run.current_step, config, now),
        submissions={s: by_status.get(s, 0) for s in ("pending", "accepted", "rejected", "voided")},
        rejections=view.rejections,
        backlog=validator_backlog(session, run_id, now),
        nodes=view.nodes,
        nodes_left_out=view.nodes_left_out,
        nodes_total=session.scalar(
            select(func.count()).select_from(Membership).where(Membership.run_id == run_id)
        )
        or 0,
        evals=metric_curve(session, run, EVAL_PREFIX),
        islands=metric_curve(session, run, ISLANDS_PREFIX),
        reward_functions=metric_curve(session, run, REWARDS_PREFIX),
        trained_step=session.scalar(
            select(func.max(TrainerMetrics.step)).where(TrainerMetrics.run_id == run_id)
        ),
        relays=view.relays,
        relays_left_out=view.relays_left_out,
    )
