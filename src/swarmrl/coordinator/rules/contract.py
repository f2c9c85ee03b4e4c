"""The run's contract at join: a role whose [contract] differs from the one the run was created with is refused.

The coordinator holds the contract of the config `admin create-run` was given; a trainer, validator, worker or
relay presents the sha256 of its own. The refusal names no field (the caller's values are not sent); the
caller reads the run's contract (`GET /v1/runs/{run}/contract`) and names the fields that differ.
"""

from __future__ import annotations

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.errors import ConflictError
from swarmrl.coordinator.store.db import Run


def run_contract(run: Run) -> ContractSection:
    if run.contract is None:
        raise ConflictError(
            f"run {run.run_id!r} has no stored contract (it was created by an older swarmrl): create a new run "
            "with `swarmrl admin create-run --config`",
            kind="no_contract",
        )
    return ContractSection.model_validate(run.contract)


def require_contract(run: Run, contract_sha256: str) -> None:
    """Refuse (409 `contract_mismatch`) a caller whose contract's sha256 is not the run's."""
    held = run_contract(run).sha256()
    if contract_sha256 != held:
        raise ConflictError(
            f"contract sha256 {contract_sha256} is not run {run.run_id!r}'s ({held}): the caller's [contract] "
            "differs from the one the run was created with",
            kind="contract_mismatch",
        )
