"""Coordinator clients, one per kind of caller, over one `SignedTransport` (signing, retries, back-off).

    PublicReads       anyone: runs and their contracts, steps, nodes, submissions, verdicts, ledger, work, the
                      dashboard summary
    NodeClient        a worker node: register, join (with the run's contract), heartbeat, lease work, upload and
                      submit rollout files
    ValidatorClient   a validator: the member calls, its contract checked, validation leases, files, verdicts
    TrainerClient     the run's trainer: its contract checked, steps, demand, its feed of accepted files,
                      outcomes, metrics, drain
    AdminClient       the operator (admin token): runs, validators, bans

Every client reads through `.reads` (the public endpoints, unsigned) on the same connection. Which identity
signs is the transport's: a test can drive a trainer's calls with a worker's key to see them refused.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx

from swarmrl.configs.contract import ContractMismatch, ContractSection
from swarmrl.coordinator import api
from swarmrl.coordinator.api import (
    HeartbeatAck,
    LedgerView,
    MemberInfo,
    MetricPoint,
    NodeInfo,
    NodeWork,
    Ok,
    OutcomeReceipt,
    PoolTicket,
    PoolTicketChallenge,
    RunCreated,
    RunState,
    RunSummary,
    SeedInfo,
    StepInfo,
    StepWork,
    SubmissionInfo,
    UnitInfo,
    UploadReceipt,
    UploadSlotInfo,
    ValidationLease,
    VerdictInfo,
    WorkLease,
)
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.transport import SignedTransport
from swarmrl.identity import Identity

Client = TypeVar("Client", bound="RoleClient")


class RoleClient:
    """What every client has: its transport, who signs, reads, and the files of submissions (which the
    coordinator serves to the trusted roles only)."""

    def __init__(self, transport: SignedTransport) -> None:
        self.transport = transport

    @classmethod
    def at(cls: type[Client], base_url: str, identity: Identity | None = None, **transport: Any) -> Client:
        """A client of `base_url` on its own transport (keyword arguments: `SignedTransport`'s)."""
        return cls(SignedTransport(base_url, identity, **transport))

    def close(self) -> None:
        self.transport.close()

    def __enter__(self: Client) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def node_id(self) -> str:
        return self.transport.node_id

    def clock(self) -> float:
        return self.transport.clock()

    @property
    def reads(self) -> PublicReads:
        return PublicReads(self.transport)

    def fetch_submission(self, submission: SubmissionInfo | int) -> bytes:
        """The file's bytes, checked against the submission's sha256 when a SubmissionInfo is given."""
        submission_id = submission if isinstance(submission, int) else submission.id
        data = self.transport.request("GET", f"/v1/submissions/{submission_id}/file").content
        if not isinstance(submission, int) and hashlib.sha256(data).hexdigest() != submission.sha256:
            raise CoordinatorError(
                200,
                "sha256_mismatch",
                f"file of submission {submission_id} does not hash to its recorded sha256",
            )
        return data

    def task_seed(self, run_id: str, step: int, batch_index: int, node_id: str | None = None) -> int:
        """This node's seed (or, for a validator/trainer, `node_id`'s) for (step, batch_index)."""
        info = self.transport.call(
            SeedInfo,
            "GET",
            f"/v1/runs/{run_id}/seed",
            params={"step": step, "batch_index": batch_index, "node_id": node_id},
        )
        return info.seed


# Each paged read's query cursor and the row field that carries it on.
_PAGE_CURSORS = {
    "submissions": ("after_id", "id"),
    "verdicts": ("after_id", "submission_id"),
    "work": ("after_node", "node_id"),
}


class PublicReads(RoleClient):
    """The public read endpoints (unsigned): what dashboards, `swarmrl status` and operators read."""

    def _get(self, model: Any, path: str, **params: Any) -> Any:
        return self.transport.call(model, "GET", path, signed=False, params=params)

    def run_state(self, run_id: str) -> RunState:
        return self._get(RunState, f"/v1/runs/{run_id}")

    def contract(self, run_id: str) -> ContractSection:
        """The [contract] the run was created with."""
        return self._get(ContractSection, f"/v1/runs/{run_id}/contract")

    def step(self, run_id: str, step: int) -> StepInfo:
        return self._get(StepInfo, f"/v1/runs/{run_id}/steps/{step}")

    def steps(self, run_id: str, *, after_step: int = -1) -> list[StepInfo]:
        return self._get(
            list[StepInfo], f"/v1/runs/{run_id}/steps", after_step=after_step if after_step >= 0 else None
        )

    def nodes(self, run_id: str, *, health: str | None = None) -> list[MemberInfo]:
        return self._get(list[MemberInfo], f"/v1/runs/{run_id}/nodes", health=health)

    def node(self, node_id: str) -> NodeInfo:
        return self._get(NodeInfo, f"/v1/nodes/{node_id}")

    def submissions(
        self,
        run_id: str,
        *,
        status: str | None = None,
        step: int | None = None,
        node_id: str | None = None,
        after_id: int = 0,
    ) -> list[SubmissionInfo]:
        return self._get(
            list[SubmissionInfo],
            f"/v1/runs/{run_id}/submissions",
            status=status,
            step=step,
            node_id=node_id,
            after_id=after_id or None,
        )

    def verdicts(self, run_id: str, *, step: int | None = None, after_id: int = 0) -> list[VerdictInfo]:
        return self._get(
            list[VerdictInfo], f"/v1/runs/{run_id}/verdicts", step=step, after_id=after_id or None
        )

    def ledger(
        self, run_id: str, *, node_id: str | None = None, after_id: int = 0, after_node: str = ""
    ) -> LedgerView:
        return self._get(
            LedgerView,
            f"/v1/runs/{run_id}/ledger",
            node_id=node_id,
            after_id=after_id or None,
            after_node=after_node or None,
        )

    def work(self, run_id: str, *, node_id: str | None = None, after_node: str = "") -> list[NodeWork]:
        """Per-node counts: units leased and expired, files generated, judged, accepted, trained."""
        return self._get(
            list[NodeWork], f"/v1/runs/{run_id}/work", node_id=node_id, after_node=after_node or None
        )

    def every_page(self, table: Literal["submissions", "verdicts", "work"], run_id: str) -> list[Any]:
        """Every row of a paged read (`submissions`, `verdicts` or `work`), page after page."""
        read = getattr(self, table)
        cursor, row_key = _PAGE_CURSORS[table]
        rows: list[Any] = []
        while page := read(run_id, **({cursor: getattr(rows[-1], row_key)} if rows else {})):
            rows += page
        return rows

    def units(
        self, run_id: str, *, step: int | None = None, node_id: str | None = None, after_id: int = 0
    ) -> list[UnitInfo]:
        return self._get(
            list[UnitInfo], f"/v1/runs/{run_id}/units", step=step, node_id=node_id, after_id=after_id or None
        )

    def step_work(self, run_id: str, step: int) -> StepWork:
        return self._get(StepWork, f"/v1/runs/{run_id}/steps/{step}/work")

    def runs(self) -> list[RunState]:
        """Every run the coordinator holds, newest first."""
        return self._get(list[RunState], "/v1/runs")

    def summary(self, run_id: str) -> RunSummary:
        """What the dashboard shows: step and rate, reward by step, nodes, rejections, validator backlog."""
        return self._get(RunSummary, f"/v1/runs/{run_id}/summary")


def _present_contract(
    client: RoleClient, model: Any, run_id: str, contract: ContractSection, action: str, **body: Any
) -> Any:
    """POST the run's `action` with `body` and the sha256 of `contract`; a refusal for another contract becomes
    ContractMismatch, naming every field that differs and both values (read from the run's contract)."""
    body["contract_sha256"] = contract.sha256()
    try:
        return client.transport.call(model, "POST", f"/v1/runs/{run_id}/{action}", json_body=body)
    except CoordinatorError as exc:
        if exc.kind != "contract_mismatch":
            raise
        raise ContractMismatch(run_id, contract, client.reads.contract(run_id)) from exc


class MemberClient(RoleClient):
    """A node's membership of a run (signed): what workers, validators and reporting relays all do."""

    def register(self, hardware: dict[str, Any] | None = None) -> NodeInfo:
        return self.transport.call(
            NodeInfo, "POST", "/v1/nodes/register", json_body={"hardware": hardware or {}}
        )

    def join(self, run_id: str, contract: ContractSection, *, role: str = "worker") -> MemberInfo:
        """Join with this node's [contract] (ContractMismatch when it is not the run's); `role="relay"`: a
        SHARDCAST relay, which may report relays and leases no work."""
        return _present_contract(self, MemberInfo, run_id, contract, "join", role=role)

    def check_contract(self, run_id: str, contract: ContractSection) -> None:
        """A validator's start (it takes part without joining): ContractMismatch when `contract` is not the
        one the run was created with."""
        _present_contract(self, Ok, run_id, contract, "contract")

    def heartbeat(
        self, run_id: str, policy_step: int | None = None, *, relay: dict[str, Any] | None = None
    ) -> HeartbeatAck:
        """`relay`: a SHARDCAST relay's report (the fields of api.RelayReport), shown on the dashboard."""
        body: dict[str, Any] = {"policy_step": policy_step}
        if relay is not None:
            body["relay"] = relay
        return self.transport.call(HeartbeatAck, "POST", f"/v1/runs/{run_id}/heartbeat", json_body=body)

    def leave(self, run_id: str) -> Ok:
        return self.transport.call(Ok, "POST", f"/v1/runs/{run_id}/leave", json_body={})


class NodeClient(MemberClient):
    """A worker node: lease units of the open step, upload each unit's rollout file, submit it."""

    direct_uploads = False  # set once the coordinator says its storage takes files from nodes directly

    def lease_work(
        self,
        run_id: str,
        *,
        max_units: int | None = None,
        policy_step: int | None = None,
        wait_s: float = 0.0,
        pool_ticket: PoolTicket | None = None,
    ) -> WorkLease:
        """The units this node holds, or new ones of the open step (or, for a node holding its policy,
        `policy_step`, of the step after it once the open step's are all out); refused with step_full,
        run_draining or poor_standing when there is no work for it (step_full after up to `wait_s` seconds of
        waiting for room at the coordinator), and with pool_ticket_needed when a node without accepted work
        needs a ticket (`solve_pool_ticket`)."""
        body = {
            "max_units": max_units,
            "policy_step": policy_step,
            "wait_s": wait_s,
            "pool_ticket": None if pool_ticket is None else pool_ticket.model_dump(),
        }
        return self.transport.call(WorkLease, "POST", f"/v1/runs/{run_id}/leases", json_body=body)

    def pool_ticket_challenge(self, run_id: str) -> PoolTicketChallenge:
        return self.transport.call(
            PoolTicketChallenge, "POST", f"/v1/runs/{run_id}/pool-ticket", json_body={}
        )

    def solve_pool_ticket(self, run_id: str) -> PoolTicket:
        """A ticket for this node's next unit of the unproven pool: about 2^bits hashes of this machine's time."""
        return api.solve_pool_ticket(run_id, self.node_id, self.pool_ticket_challenge(run_id))

    def request_upload(
        self, run_id: str, step: int, batch_index: int, sha256: str, size_bytes: int
    ) -> UploadSlotInfo:
        body = {"step": step, "batch_index": batch_index, "sha256": sha256, "size_bytes": size_bytes}
        return self.transport.call(UploadSlotInfo, "POST", f"/v1/runs/{run_id}/uploads", json_body=body)

    def upload(self, slot: UploadSlotInfo, data: bytes) -> UploadReceipt:
        """To the coordinator (signed), or straight to the storage backend when the slot has a presigned URL."""
        if slot.upload_url is None:
            return self.transport.call(UploadReceipt, "PUT", slot.upload_path, content=data)
        digest = hashlib.sha256(data)
        headers = {"x-amz-checksum-sha256": base64.b64encode(digest.digest()).decode()}
        try:
            response = self.transport.http.put(slot.upload_url, content=data, headers=headers)
        except httpx.TransportError as exc:
            raise CoordinatorError(0, "unreachable", f"storage upload: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 300:
            raise CoordinatorError(response.status_code, "upload_refused", response.text[:500])
        return UploadReceipt(slot_id=slot.slot_id, sha256=digest.hexdigest(), size_bytes=len(data))

    def submit(
        self, run_id: str, slot_id: str, sha256: str, step: int, rows: int, tokens: int
    ) -> SubmissionInfo:
        body = {"slot_id": slot_id, "sha256": sha256, "step": step, "rows": rows, "tokens": tokens}
        return self.transport.call(SubmissionInfo, "POST", f"/v1/runs/{run_id}/submissions", json_body=body)

    def upload_and_submit(
        self, run_id: str, step: int, batch_index: int, file: str | Path | bytes, rows: int, tokens: int
    ) -> SubmissionInfo:
        """The rollout file (a path or its bytes) of a leased unit, uploaded and submitted in one request; where
        the coordinator's storage takes files straight from nodes, slot → upload → submit (remembered)."""
        data = file if isinstance(file, bytes) else Path(file).read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        if not self.direct_uploads:
            claim = {"step": step, "batch_index": batch_index, "sha256": sha256, "size_bytes": len(data)}
            try:
                return self.transport.call(
                    SubmissionInfo,
                    "PUT",
                    f"/v1/uploads/runs/{run_id}/submissions",
                    params={**claim, "rows": rows, "tokens": tokens},
                    content=data,
                )
            except CoordinatorError as exc:
                if exc.kind != "direct_upload":
                    raise
                self.direct_uploads = True
        slot = self.request_upload(run_id, step, batch_index, sha256, len(data))
        self.upload(slot, data)
        return self.submit(run_id, slot.slot_id, sha256, step, rows, tokens)


class ValidatorClient(MemberClient):
    """A validator: take the oldest pending file on a validation lease, judge it, post the verdict."""

    def lease_validation(self, run_id: str, *, wait_s: float = 0.0) -> ValidationLease:
        """The file this validator holds (renewed), or the oldest unheld pending one; `submission` None: none
        (after up to `wait_s` seconds of waiting for one at the coordinator)."""
        return self.transport.call(
            ValidationLease, "POST", f"/v1/runs/{run_id}/validation-leases", json_body={"wait_s": wait_s}
        )

    def pending_submissions(
        self, run_id: str, *, step: int | None = None, after_id: int = 0
    ) -> list[SubmissionInfo]:
        return self.reads.submissions(run_id, status="pending", step=step, after_id=after_id)

    def post_verdict(
        self,
        submission_id: int,
        *,
        accept: bool,
        check: str,
        reason: str = "",
        rewards_summary: dict[str, Any] | None = None,
        rows: int | None = None,
        tokens: int | None = None,
    ) -> VerdictInfo:
        """`rows`, `tokens`: what the validator measured in the file (the credit of an accepted file)."""
        body = {
            "accept": accept,
            "check": check,
            "reason": reason,
            "rewards_summary": rewards_summary or {},
            "rows": rows,
            "tokens": tokens,
        }
        return self.transport.call(
            VerdictInfo, "POST", f"/v1/submissions/{submission_id}/verdict", json_body=body
        )


class TrainerClient(RoleClient):
    """The run's trainer (signed with the key the run was created with)."""

    def check_contract(self, run_id: str, contract: ContractSection) -> None:
        """The trainer's start: ContractMismatch when `contract` is not the one the run was created with."""
        _present_contract(self, Ok, run_id, contract, "contract")

    def publish_step(
        self,
        run_id: str,
        step: int,
        manifest_sha256: str | None = None,
        manifest_url: str | None = None,
        *,
        units: int | None = None,
    ) -> StepInfo:
        body = {
            "step": step,
            "manifest_sha256": manifest_sha256,
            "manifest_url": manifest_url,
            "units": units,
        }
        return self.transport.call(StepInfo, "POST", f"/v1/runs/{run_id}/steps", json_body=body)

    def report_metrics(self, run_id: str, step: int, metrics: dict[str, float]) -> MetricPoint:
        """The trainer's scalars for policy step `step` (merged into those it sent before)."""
        return self.transport.call(
            MetricPoint, "POST", f"/v1/runs/{run_id}/steps/{step}/metrics", json_body={"metrics": metrics}
        )

    def set_demand(self, run_id: str, step: int, units: int) -> StepWork:
        return self.transport.call(
            StepWork, "PUT", f"/v1/runs/{run_id}/demand", json_body={"step": step, "units": units}
        )

    def training_feed(
        self, run_id: str, step: int, *, after_id: int = 0, wait_s: float = 0.0
    ) -> list[SubmissionInfo]:
        """A page of the files step `step` may train on, after `after_id`; with `wait_s`, an empty page is held
        at the coordinator until a file is decided (or the time is up)."""
        return self.transport.call(
            list[SubmissionInfo],
            "GET",
            f"/v1/runs/{run_id}/feed",
            params={"step": step, "after_id": after_id or None, "wait_s": wait_s or None},
        )

    def report_outcomes(
        self,
        run_id: str,
        step: int,
        *,
        trained: Sequence[tuple[int, int]] = (),
        stale: Sequence[int] = (),
        refused: Sequence[int] = (),
    ) -> OutcomeReceipt:
        """`trained`: (submission id, rows read) of the files step `step` trained on."""
        body = {
            "trained": [{"id": i, "rows": rows} for i, rows in trained],
            "stale": list(stale),
            "refused": list(refused),
        }
        return self.transport.call(
            OutcomeReceipt, "POST", f"/v1/runs/{run_id}/steps/{step}/outcomes", json_body=body
        )

    def audit_submission(
        self,
        run_id: str,
        submission_id: int,
        *,
        accept: bool,
        check: str,
        reason: str = "",
        rows: int | None = None,
        tokens: int | None = None,
    ) -> VerdictInfo:
        """The trainer's checks of a file the spot-check draw left unjudged, with what it measured in the file."""
        body = {"accept": accept, "check": check, "reason": reason, "rows": rows, "tokens": tokens}
        return self.transport.call(
            VerdictInfo, "POST", f"/v1/runs/{run_id}/submissions/{submission_id}/audit", json_body=body
        )

    def drain(self, run_id: str) -> RunState:
        """End the run: no new work; it reads `drained` once every submitted file has its verdict."""
        return self.transport.call(RunState, "POST", f"/v1/runs/{run_id}/drain", json_body={})

    def accepted_submissions(self, run_id: str, step: int, *, after_id: int = 0) -> list[SubmissionInfo]:
        return self.transport.call(
            list[SubmissionInfo],
            "GET",
            f"/v1/runs/{run_id}/steps/{step}/accepted",
            params={"after_id": after_id or None},
        )


class AdminClient(RoleClient):
    """The operator, with the coordinator's admin token."""

    def _admin(self, model: Any, method: str, path: str, body: dict | None = None) -> Any:
        return self.transport.call(model, method, path, json_body=body, admin=True)

    def create_run(
        self,
        run_id: str,
        trainer_public_key: str,
        contract: ContractSection,
        *,
        run_secret: str | None = None,
        bound_claims: bool = True,
    ) -> RunCreated:
        """A run of the config whose [contract] is `contract`: every role must present the same to take part,
        and (`bound_claims`) a file's claimed rows and tokens must fit the contract's unit."""
        body = {
            "run_id": run_id,
            "trainer_public_key": trainer_public_key,
            "contract": contract.model_dump(mode="json"),
            "run_secret": run_secret,
            "bound_claims": bound_claims,
        }
        return self._admin(RunCreated, "POST", "/v1/admin/runs", body)

    def add_validator(self, run_id: str, public_key: str) -> Ok:
        return self._admin(Ok, "POST", f"/v1/admin/runs/{run_id}/validators", {"public_key": public_key})

    def set_step(self, run_id: str, step: int) -> RunState:
        return self._admin(RunState, "PUT", f"/v1/admin/runs/{run_id}/step", {"step": step})

    def ban(self, node_id: str, reason: str = "banned by admin") -> Ok:
        return self._admin(Ok, "POST", "/v1/admin/bans", {"node_id": node_id, "reason": reason})

    def unban(self, node_id: str) -> Ok:
        return self._admin(Ok, "DELETE", f"/v1/admin/bans/{node_id}")
