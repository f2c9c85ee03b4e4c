"""Node lifecycle: register, join, heartbeat, leave, and the seed a node must use."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from sqlalchemy import Connection, Integer, bindparam, func, select, update
from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import (
    Heartbeat,
    HeartbeatAck,
    HexKey,
    JoinRun,
    MemberInfo,
    NodeInfo,
    Ok,
    RegisterNode,
    RelayReport,
    RunId,
    SeedInfo,
    Step,
)
from swarmrl.coordinator.errors import ApiError, ForbiddenError
from swarmrl.coordinator.rules import janitor
from swarmrl.coordinator.rules.contract import require_contract
from swarmrl.coordinator.rules.health import Health, dead_cutoff, health_of
from swarmrl.coordinator.rules.leases import ever_leased
from swarmrl.coordinator.seeds import task_seed
from swarmrl.coordinator.server.access import (
    active_member,
    check_leasable,
    get_run,
    is_validator,
    require_registered,
)
from swarmrl.coordinator.server.auth import SignedCaller, state_of
from swarmrl.coordinator.server.views import member_info, node_info
from swarmrl.coordinator.store.db import Membership, Node, RelayState, Run

router = APIRouter(tags=["nodes"])

MAX_HARDWARE_JSON = 8192
MAX_BATCH_INDEX = 2**31 - 1


@router.post("/v1/nodes/register", response_model=NodeInfo)
def register(body: RegisterNode, request: Request, who: SignedCaller) -> NodeInfo:
    node_id = who.require_node()
    if len(body.model_dump_json()) > MAX_HARDWARE_JSON:
        raise ApiError(f"hardware description over {MAX_HARDWARE_JSON} bytes", kind="too_large", status=413)
    state = state_of(request)
    with state.sessions() as session, session.begin():
        node = session.get(Node, node_id)
        if node is None:
            node = Node(node_id=node_id, hardware=body.hardware, registered_at=state.clock(), hard_rejects=0)
            session.add(node)
        else:
            node.hardware = body.hardware
        return node_info(node, banned=False)


@router.post("/v1/runs/{run_id}/join", response_model=MemberInfo)
def join(run_id: RunId, body: JoinRun, request: Request, who: SignedCaller) -> MemberInfo:
    """Join as a worker, or as a relay (which may report its place in the SHARDCAST tree and leases no work),
    with the sha256 of the node's [contract], which must be the run's; joining again may change the role."""
    node_id = who.require_node()
    role = body.role
    state = state_of(request)
    now = state.clock()
    allowed = state.config.worker_allow_list
    if role == "worker" and allowed and node_id not in allowed:
        raise ForbiddenError(
            "admission: this node is not on the operator's worker allow-list", kind="not_allowed"
        )
    with state.sessions() as session, session.begin():
        require_contract(get_run(session, run_id), body.contract_sha256)
        require_registered(session, node_id)
        member = session.get(Membership, (run_id, node_id))
        if member is None:
            member = Membership(
                run_id=run_id,
                node_id=node_id,
                status="active",
                joined_at=now,
                last_seen=now,
                heartbeats=0,
                policy_step=None,
                role=role,
            )
            session.add(member)
        else:
            # Joining again is how a left, ejected or silent node comes back; it counts as a heartbeat.
            if member.status != "active" or health_of(member.last_seen, now, state.config) is Health.DEAD:
                member.joined_at = now
            member.status, member.last_seen, member.role = "active", now, role
        return member_info(member, now, state.config)


@router.post("/v1/runs/{run_id}/heartbeat", response_model=HeartbeatAck)
def heartbeat(run_id: RunId, body: Heartbeat, request: Request, who: SignedCaller) -> HeartbeatAck:
    node_id = who.require_node()
    state = state_of(request)
    now = state.clock()
    janitor.maybe_purge(state, now)  # heartbeats are the steady beat that keeps storage swept
    with state.sessions() as session, session.begin():
        connection = session.connection()
        if not _beat(connection, run_id, node_id, body.policy_step, now, state.config):
            # Not a live active member (or no such run): the full look-ups name the refusal, and eject a dead
            # node. One that passes them joined again since the beat was tried: it is live now, so beat again.
            get_run(session, run_id)
            active_member(session, run_id, node_id, state.config, now)
            _beat(connection, run_id, node_id, body.policy_step, now, state.config)
        if body.relay is not None:
            _report_relay(session, run_id, node_id, body.relay, now)
        current_step, async_level = connection.execute(_RUN_WINDOW, {"run": run_id}).one()
        return HeartbeatAck(
            current_step=current_step,
            async_level=async_level,
            min_policy_step=max(0, current_step - async_level),
            next_heartbeat_s=state.config.heartbeat_interval_s,
        )


# A heartbeat is most of a node's requests: one UPDATE that only a live active member's row matches, not the ORM's
# loads of the run and the membership and its flush (most of the request's CPU). "Live": not yet dead by
# `health_of` (its missed beats below `dead_after_missed`).
_BEAT = (
    update(Membership)
    .where(
        Membership.run_id == bindparam("run"),
        Membership.node_id == bindparam("node"),
        Membership.status == "active",
        Membership.last_seen > bindparam("dead_before"),
    )
    .values(
        last_seen=bindparam("seen_at"),
        heartbeats=Membership.heartbeats + 1,
        policy_step=func.coalesce(bindparam("step", type_=Integer), Membership.policy_step),
    )
)
_RUN_WINDOW = select(Run.current_step, Run.async_level).where(Run.run_id == bindparam("run"))


def _beat(
    connection: Connection,
    run_id: str,
    node_id: str,
    policy_step: int | None,
    now: float,
    config: CoordinatorConfig,
) -> bool:
    """Record the heartbeat of a live active member; False when the node is none."""
    parameters = {
        "run": run_id,
        "node": node_id,
        "dead_before": dead_cutoff(now, config),
        "seen_at": now,
        "step": policy_step,
    }
    return connection.execute(_BEAT, parameters).rowcount == 1


def _report_relay(session: Session, run_id: str, node_id: str, relay: RelayReport, now: float) -> None:
    member = session.get(Membership, (run_id, node_id))
    if member is None or member.role != "relay":
        raise ForbiddenError("only a node that joined the run as a relay reports relays", kind="not_relay")
    report = session.get(RelayState, (run_id, node_id))
    if report is None:
        report = RelayState(run_id=run_id, node_id=node_id)
        session.add(report)
    report.report, report.reported_at = relay.model_dump(mode="json"), now


@router.post("/v1/runs/{run_id}/leave", response_model=Ok)
def leave(run_id: RunId, request: Request, who: SignedCaller) -> Ok:
    node_id = who.require_node()
    state = state_of(request)
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        member = session.get(Membership, (run_id, node_id))
        if member is None:
            raise ForbiddenError("not a member of this run", kind="not_member")
        if member.status == "active":
            member.status = "left"
    return Ok()


@router.get("/v1/runs/{run_id}/seed", response_model=SeedInfo)
def seed(
    run_id: RunId,
    request: Request,
    who: SignedCaller,
    step: Annotated[Step, Query()],
    batch_index: Annotated[int, Query(ge=0, le=MAX_BATCH_INDEX)],
    node_id: Annotated[
        HexKey | None,
        Query(description="whose seed; only validators, the trainer and admin may ask for another node's"),
    ] = None,
) -> SeedInfo:
    """The seed for (node, step, batch): a node may only learn the seeds of units leased to it (its leases carry
    them); validators, the trainer and the admin may ask for any node's."""
    state = state_of(request)
    with state.sessions() as session:
        run = get_run(session, run_id)
        privileged = (
            who.is_admin
            or who.node_id == run.trainer_public_key
            or is_validator(session, run_id, who.node_id)
        )
        target = node_id or who.node_id
        if target is None:
            raise ApiError("the admin must name node_id", kind="node_id_required", status=422)
        if not privileged:
            if target != who.node_id:
                raise ForbiddenError("a node may only ask for its own seeds", kind="not_own_seed")
            active_member(session, run_id, target, state.config, state.clock())
            check_leasable(run, step, state.config)
            if not ever_leased(session, run_id, target, step, batch_index):
                raise ForbiddenError(
                    f"unit ({step}, {batch_index}) was not leased to this node", kind="not_leased"
                )
        value = task_seed(run_id, target, step, batch_index, run.run_secret)
    return SeedInfo(run_id=run_id, node_id=target, step=step, batch_index=batch_index, seed=value)
