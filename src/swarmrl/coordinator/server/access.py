"""Look-ups that also decide permission: the run, its trainer, its validators, an active member."""

from __future__ import annotations

from sqlalchemy.orm import Session

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.errors import ConflictError, ForbiddenError, NotFoundError
from swarmrl.coordinator.rules.health import Health, health_of
from swarmrl.coordinator.rules.leases import lease_steps
from swarmrl.coordinator.server.auth import Caller
from swarmrl.coordinator.store.db import Membership, Node, Run, Validator


def get_run(session: Session, run_id: str, *, for_update: bool = False) -> Run:
    """`for_update` locks the row until the transaction ends (Postgres; SQLite serialises writers anyway)."""
    run = session.get(Run, run_id, with_for_update=for_update)
    if run is None:
        raise NotFoundError(f"no run {run_id!r}", kind="unknown_run")
    return run


def is_validator(session: Session, run_id: str, node_id: str | None) -> bool:
    return node_id is not None and session.get(Validator, (run_id, node_id)) is not None


def require_trainer_or_admin(run: Run, caller: Caller) -> None:
    if not caller.is_admin and caller.node_id != run.trainer_public_key:
        raise ForbiddenError("only the run's trainer key or the admin may do this", kind="not_trainer")


def require_validator(session: Session, run_id: str, caller: Caller) -> str:
    if caller.is_admin or not is_validator(session, run_id, caller.node_id):
        raise ForbiddenError("only a validator registered for this run may do this", kind="not_validator")
    assert caller.node_id is not None
    return caller.node_id


def require_privileged(session: Session, run: Run, caller: Caller) -> None:
    """Admin, the trainer or a validator: the parties that may read submitted files."""
    if (
        caller.is_admin
        or caller.node_id == run.trainer_public_key
        or is_validator(session, run.run_id, caller.node_id)
    ):
        return
    raise ForbiddenError("only the trainer, a validator or the admin may do this", kind="not_privileged")


def require_registered(session: Session, node_id: str) -> Node:
    node = session.get(Node, node_id)
    if node is None:
        raise ForbiddenError("register this key first (POST /v1/nodes/register)", kind="not_registered")
    return node


def active_member(
    session: Session, run_id: str, node_id: str, config: CoordinatorConfig, now: float
) -> Membership:
    """The node's live membership; a node found dead is ejected here and must join again."""
    member = session.get(Membership, (run_id, node_id))
    if member is None or member.status == "left":
        raise ForbiddenError("join the run first", kind="not_member")
    if member.status == "active" and health_of(member.last_seen, now, config) is Health.DEAD:
        member.status = "ejected"
        session.commit()
    if member.status == "ejected":
        raise ConflictError(
            "this node was ejected (missed heartbeats or hard rejection); join again", kind="ejected"
        )
    return member


def check_leasable(run: Run, step: int, config: CoordinatorConfig) -> None:
    """Refuse a step past those a lease may be granted for (the open one and `lease_steps` past it)."""
    if step > lease_steps(run, config)[-1]:
        raise ConflictError(f"step {step} has not opened (current {run.current_step})", kind="future_step")


def check_step_window(run: Run, step: int, config: CoordinatorConfig) -> None:
    """Work counts only for a step a lease may be granted for, or one no older than the async level allows."""
    check_leasable(run, step, config)
    if step < run.current_step - run.async_level:
        raise ConflictError(
            f"step {step} is stale: current {run.current_step}, async level {run.async_level}",
            kind="stale_step",
        )
