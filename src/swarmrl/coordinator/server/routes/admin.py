"""Operator and trainer endpoints: runs, validators, bans, the step counter and checkpoint manifests."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request

from swarmrl.coordinator.api import (
    AddValidator,
    BanRequest,
    CreateRun,
    HexKey,
    Ok,
    PublishStep,
    RunCreated,
    RunId,
    RunState,
    SetStep,
    StepInfo,
)
from swarmrl.coordinator.errors import ConflictError, NotFoundError
from swarmrl.coordinator.rules import janitor, spot_checks
from swarmrl.coordinator.rules.penalties import ban_node
from swarmrl.coordinator.server.access import get_run, require_trainer_or_admin
from swarmrl.coordinator.server.auth import AdminCaller, SignedCaller, state_of
from swarmrl.coordinator.server.views import run_state, step_info
from swarmrl.coordinator.store.db import Ban, Run, Step, Validator

router = APIRouter()


@router.post("/v1/admin/runs", status_code=201, response_model=RunCreated, tags=["admin"])
def create_run(body: CreateRun, request: Request, _: AdminCaller) -> RunCreated:
    state = state_of(request)
    with state.sessions() as session, session.begin():
        if session.get(Run, body.run_id) is not None:
            raise ConflictError(f"run {body.run_id!r} exists", kind="run_exists")
        contract = body.contract
        run = Run(
            run_id=body.run_id,
            trainer_public_key=body.trainer_public_key,
            async_level=contract.async_level,
            current_step=0,
            run_secret=body.run_secret if body.run_secret is not None else secrets.token_hex(32),
            created_at=state.clock(),
            status="open",
            unit_rows=contract.rows_per_batch if body.bound_claims else None,
            unit_max_tokens=contract.max_new_tokens if body.bound_claims else None,
            contract=contract.model_dump(mode="json"),
        )
        session.add(run)
    return RunCreated(**run_state(run, None).model_dump(), run_secret=run.run_secret)


@router.post("/v1/admin/runs/{run_id}/validators", response_model=Ok, tags=["admin"])
def add_validator(run_id: RunId, body: AddValidator, request: Request, _: AdminCaller) -> Ok:
    state = state_of(request)
    with state.sessions() as session, session.begin():
        get_run(session, run_id)
        if session.get(Validator, (run_id, body.public_key)) is None:
            session.add(Validator(run_id=run_id, public_key=body.public_key, added_at=state.clock()))
    return Ok()


@router.put("/v1/admin/runs/{run_id}/step", response_model=RunState, tags=["admin"])
def set_step(run_id: RunId, body: SetStep, request: Request, _: AdminCaller) -> RunState:
    state = state_of(request)
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        run.current_step = body.step
        answer = run_state(run, session.get(Step, (run_id, body.step)))
    state.work_changed.notify()
    return answer


@router.post("/v1/admin/bans", response_model=Ok, tags=["admin"])
def ban(body: BanRequest, request: Request, _: AdminCaller) -> Ok:
    """Ban a key from every run; its pending and unpaid work is voided (see `penalties`)."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        ban_node(session, body.node_id, body.reason, state.clock())
    state.files_decided.notify()  # its voided pending files no longer hold back the files behind them
    janitor.release_node(state, body.node_id, state.clock())
    return Ok()


@router.delete("/v1/admin/bans/{node_id}", response_model=Ok, tags=["admin"])
def unban(node_id: HexKey, request: Request, _: AdminCaller) -> Ok:
    state = state_of(request)
    with state.sessions() as session, session.begin():
        existing = session.get(Ban, node_id)
        if existing is None:
            raise NotFoundError("that node is not banned", kind="not_banned")
        session.delete(existing)
    return Ok()


@router.post("/v1/runs/{run_id}/steps", response_model=StepInfo, tags=["trainer"])
def publish_step(run_id: RunId, body: PublishStep, request: Request, who: SignedCaller) -> StepInfo:
    """The trainer announces checkpoint `step` (manifest hash and URL), moves the step counter to it and says how
    many work units the step wants. Files the spot-check draw skipped and no step read while their step was in
    the async window go to the validators."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        run = get_run(session, run_id)
        require_trainer_or_admin(run, who)
        existing = session.get(Step, (run_id, body.step))
        if existing is not None:
            if (existing.manifest_sha256, existing.manifest_url) != (body.manifest_sha256, body.manifest_url):
                raise ConflictError(
                    f"step {body.step} was already published with another manifest", kind="step_published"
                )
            return step_info(existing)
        if body.step < run.current_step:
            raise ConflictError(
                f"step {body.step} is behind the current step {run.current_step}", kind="step_behind"
            )
        step = Step(
            run_id=run_id,
            step=body.step,
            manifest_sha256=body.manifest_sha256,
            manifest_url=body.manifest_url,
            published_at=state.clock(),
        )
        session.add(step)
        run.current_step = body.step
        run.step_units = body.units
        spot_checks.requeue_unmeasured(session, run)
        answer = step_info(step)
    state.work_changed.notify()  # nodes waiting for room lease the new step's units now
    state.files_pending.notify()  # and validators take the unjudged files it sent back to them
    return answer
