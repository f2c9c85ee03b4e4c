"""The run's contract: read by anyone, checked by the roles that take part without joining (the trainer, the
validators); workers and relays present theirs when they join (`nodes.join`)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.api import ContractCheck, Ok, RunId
from swarmrl.coordinator.rules.contract import require_contract, run_contract
from swarmrl.coordinator.server.access import get_run
from swarmrl.coordinator.server.auth import SignedCaller, state_of

router = APIRouter(tags=["contract"])


@router.get("/v1/runs/{run_id}/contract", response_model=ContractSection)
def get_contract(run_id: RunId, request: Request) -> ContractSection:
    """The [contract] the run was created with (public: it holds no secret)."""
    state = state_of(request)
    with state.sessions() as session:
        return run_contract(get_run(session, run_id))


@router.post("/v1/runs/{run_id}/contract", response_model=Ok)
def check_contract(run_id: RunId, body: ContractCheck, request: Request, who: SignedCaller) -> Ok:
    """Ok when the caller's contract is the run's; 409 `contract_mismatch` otherwise."""
    who.require_node()
    state = state_of(request)
    with state.sessions() as session:
        require_contract(get_run(session, run_id), body.contract_sha256)
    return Ok()
