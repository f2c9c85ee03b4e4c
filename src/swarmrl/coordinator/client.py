"""`CoordinatorClient`: every call the worker, validator, trainer and operator make, signed and retried."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from swarmrl.coordinator.api import (
    HeartbeatAck,
    LedgerView,
    MemberInfo,
    MetricPoint,
    NodeInfo,
    NodeWork,
    Ok,
    OutcomeReceipt,
    RunCreated,
    RunState,
    RunSummary,
    SeedInfo,
    StepInfo,
    StepWork,
    SubmissionInfo,
    UnitBounds,
    UnitInfo,
    UploadReceipt,
    UploadSlotInfo,
    ValidationLease,
    VerdictInfo,
    WorkLease,
)
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.signing import sign_request
from swarmrl.identity import Identity

log = logging.getLogger(__name__)

Model = TypeVar("Model")


class CoordinatorClient:
    """Signs each request with `identity` (fresh timestamp and nonce per attempt); sends the admin token instead
    when `admin=True` is passed to a call. Retries connection errors and 5xx with exponential back-off; any
    other refusal raises `CoordinatorError(status, kind, detail)` at once."""

    def __init__(
        self,
        base_url: str,
        identity: Identity | None = None,
        *,
        admin_token: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 4,
        backoff_s: float = 0.25,
        max_backoff_s: float = 8.0,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.identity = identity
        self.clock = clock
        self.admin_token = admin_token
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def node_id(self) -> str:
        if self.identity is None:
            raise CoordinatorError(0, "no_identity", "this client has no identity to sign with")
        return self.identity.node_id

    # --- transport -----------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: BaseModel | dict | None = None,
        content: bytes | None = None,
        params: dict[str, Any] | None = None,
        admin: bool = False,
        signed: bool = True,
    ) -> httpx.Response:
        """One call, retried; returns the 2xx response or raises CoordinatorError."""
        if json_body is not None:
            payload = json_body.model_dump(mode="json") if isinstance(json_body, BaseModel) else json_body
            body = json.dumps(payload, separators=(",", ":")).encode()
            content_type = "application/json"
        else:
            body = content or b""
            content_type = "application/octet-stream"
        query = {k: v for k, v in (params or {}).items() if v is not None}
        target = f"{path}?{urlencode(query)}" if query else path
        attempt = 0
        while True:
            headers = {"content-type": content_type} if body or json_body is not None else {}
            if admin:
                if not self.admin_token:
                    raise CoordinatorError(0, "no_admin_token", "this client has no admin token")
                headers["authorization"] = f"Bearer {self.admin_token}"
            elif signed:
                if self.identity is None:
                    raise CoordinatorError(0, "no_identity", "this client has no identity to sign with")
                headers.update(sign_request(self.identity, method, target, body, now=self.clock()))
            try:
                response = self._http.request(method, target, content=body, headers=headers)
            except httpx.TransportError as exc:
                failure: CoordinatorError = CoordinatorError(0, "unreachable", f"{type(exc).__name__}: {exc}")
            else:
                if response.status_code < 400:
                    return response
                failure = _error_from(response)
                if response.status_code < 500:
                    raise failure
            if attempt >= self.max_retries:
                raise failure
            delay = min(self.max_backoff_s, self.backoff_s * 2**attempt)
            log.warning(
                "coordinator %s %s failed (%s); retry %d in %.2fs", method, path, failure, attempt + 1, delay
            )
            time.sleep(delay)
            attempt += 1

    def _call(self, model: type[Model] | Any, method: str, path: str, **kwargs: Any) -> Model:
        response = self.request(method, path, **kwargs)
        try:
            return TypeAdapter(model).validate_python(response.json())
        except (ValueError, ValidationError) as exc:
            raise CoordinatorError(response.status_code, "bad_response", f"unexpected answer: {exc}") from exc

    # --- operator (admin token) ----------------------------------------------------------------------------
    def create_run(
        self,
        run_id: str,
        trainer_public_key: str,
        *,
        async_level: int = 2,
        run_secret: str | None = None,
        unit: UnitBounds | None = None,
    ) -> RunCreated:
        """`unit`: the bounds of a unit's file (claims outside are refused; `UnitBounds.of_worker(config.worker)`)."""
        body = {
            "run_id": run_id,
            "trainer_public_key": trainer_public_key,
            "async_level": async_level,
            "run_secret": run_secret,
            "unit": unit.model_dump() if unit is not None else None,
        }
        return self._call(RunCreated, "POST", "/v1/admin/runs", json_body=body, admin=True)

    def add_validator(self, run_id: str, public_key: str) -> Ok:
        return self._call(
            Ok,
            "POST",
            f"/v1/admin/runs/{run_id}/validators",
            json_body={"public_key": public_key},
            admin=True,
        )

    def set_step(self, run_id: str, step: int) -> RunState:
        return self._call(
            RunState, "PUT", f"/v1/admin/runs/{run_id}/step", json_body={"step": step}, admin=True
        )

    def ban(self, node_id: str, reason: str = "banned by admin") -> Ok:
        return self._call(
            Ok, "POST", "/v1/admin/bans", json_body={"node_id": node_id, "reason": reason}, admin=True
        )

    def unban(self, node_id: str) -> Ok:
        return self._call(Ok, "DELETE", f"/v1/admin/bans/{node_id}", admin=True)

    # --- node lifecycle ------------------------------------------------------------------------------------
    def register(self, hardware: dict[str, Any] | None = None) -> NodeInfo:
        return self._call(NodeInfo, "POST", "/v1/nodes/register", json_body={"hardware": hardware or {}})

    def join(self, run_id: str, *, role: str = "worker") -> MemberInfo:
        """`role="relay"`: a SHARDCAST relay, which may report relays and leases no work."""
        return self._call(MemberInfo, "POST", f"/v1/runs/{run_id}/join", json_body={"role": role})

    def heartbeat(
        self, run_id: str, policy_step: int | None = None, *, relay: dict[str, Any] | None = None
    ) -> HeartbeatAck:
        """`relay`: a SHARDCAST relay's report (the fields of api.RelayReport), shown on the dashboard."""
        body: dict[str, Any] = {"policy_step": policy_step}
        if relay is not None:
            body["relay"] = relay
        return self._call(HeartbeatAck, "POST", f"/v1/runs/{run_id}/heartbeat", json_body=body)

    def leave(self, run_id: str) -> Ok:
        return self._call(Ok, "POST", f"/v1/runs/{run_id}/leave", json_body={})

    def task_seed(self, run_id: str, step: int, batch_index: int, node_id: str | None = None) -> int:
        """This node's seed (or, for a validator/trainer, `node_id`'s) for (step, batch_index)."""
        info = self._call(
            SeedInfo,
            "GET",
            f"/v1/runs/{run_id}/seed",
            params={"step": step, "batch_index": batch_index, "node_id": node_id},
        )
        return info.seed

    # --- worker: lease, upload and submit -------------------------------------------------------------------
    def lease_work(self, run_id: str, *, max_units: int | None = None) -> WorkLease:
        """The units this node holds, or new ones of the open step; refused with step_full, run_draining or
        poor_standing when there is no work for it."""
        return self._call(WorkLease, "POST", f"/v1/runs/{run_id}/leases", json_body={"max_units": max_units})

    def request_upload(
        self, run_id: str, step: int, batch_index: int, sha256: str, size_bytes: int
    ) -> UploadSlotInfo:
        body = {"step": step, "batch_index": batch_index, "sha256": sha256, "size_bytes": size_bytes}
        return self._call(UploadSlotInfo, "POST", f"/v1/runs/{run_id}/uploads", json_body=body)

    def upload(self, slot: UploadSlotInfo, data: bytes) -> UploadReceipt:
        """To the coordinator (signed), or straight to the storage backend when the slot has a presigned URL."""
        if slot.upload_url is None:
            return self._call(UploadReceipt, "PUT", slot.upload_path, content=data)
        digest = hashlib.sha256(data)
        headers = {"x-amz-checksum-sha256": base64.b64encode(digest.digest()).decode()}
        try:
            response = self._http.put(slot.upload_url, content=data, headers=headers)
        except httpx.TransportError as exc:
            raise CoordinatorError(0, "unreachable", f"storage upload: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 300:
            raise CoordinatorError(response.status_code, "upload_refused", response.text[:500])
        return UploadReceipt(slot_id=slot.slot_id, sha256=digest.hexdigest(), size_bytes=len(data))

    def submit(
        self, run_id: str, slot_id: str, sha256: str, step: int, rows: int, tokens: int
    ) -> SubmissionInfo:
        body = {"slot_id": slot_id, "sha256": sha256, "step": step, "rows": rows, "tokens": tokens}
        return self._call(SubmissionInfo, "POST", f"/v1/runs/{run_id}/submissions", json_body=body)

    def upload_and_submit(
        self, run_id: str, step: int, batch_index: int, file: str | Path | bytes, rows: int, tokens: int
    ) -> SubmissionInfo:
        """Slot → upload → submit for the rollout file (a path or its bytes) of a leased unit."""
        data = file if isinstance(file, bytes) else Path(file).read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        slot = self.request_upload(run_id, step, batch_index, sha256, len(data))
        self.upload(slot, data)
        return self.submit(run_id, slot.slot_id, sha256, step, rows, tokens)

    # --- validator -----------------------------------------------------------------------------------------
    def lease_validation(self, run_id: str) -> ValidationLease:
        """The file this validator holds (renewed), or the oldest unheld pending one; `submission` None: none."""
        return self._call(ValidationLease, "POST", f"/v1/runs/{run_id}/validation-leases", json_body={})

    def pending_submissions(
        self, run_id: str, *, step: int | None = None, after_id: int = 0
    ) -> list[SubmissionInfo]:
        return self.submissions(run_id, status="pending", step=step, after_id=after_id)

    def fetch_submission(self, submission: SubmissionInfo | int) -> bytes:
        """The file's bytes, checked against the submission's sha256 when a SubmissionInfo is given."""
        submission_id = submission if isinstance(submission, int) else submission.id
        data = self.request("GET", f"/v1/submissions/{submission_id}/file").content
        if not isinstance(submission, int) and hashlib.sha256(data).hexdigest() != submission.sha256:
            raise CoordinatorError(
                200,
                "sha256_mismatch",
                f"file of submission {submission_id} does not hash to its recorded sha256",
            )
        return data

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
        return self._call(VerdictInfo, "POST", f"/v1/submissions/{submission_id}/verdict", json_body=body)

    # --- trainer -------------------------------------------------------------------------------------------
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
        return self._call(StepInfo, "POST", f"/v1/runs/{run_id}/steps", json_body=body)

    def report_metrics(self, run_id: str, step: int, metrics: dict[str, float]) -> MetricPoint:
        """The trainer's scalars for policy step `step` (merged into those it sent before)."""
        return self._call(
            MetricPoint, "POST", f"/v1/runs/{run_id}/steps/{step}/metrics", json_body={"metrics": metrics}
        )

    def set_demand(self, run_id: str, step: int, units: int) -> StepWork:
        return self._call(
            StepWork, "PUT", f"/v1/runs/{run_id}/demand", json_body={"step": step, "units": units}
        )

    def training_feed(self, run_id: str, step: int, *, after_id: int = 0) -> list[SubmissionInfo]:
        return self._call(
            list[SubmissionInfo],
            "GET",
            f"/v1/runs/{run_id}/feed",
            params={"step": step, "after_id": after_id or None},
        )

    def report_outcomes(
        self,
        run_id: str,
        step: int,
        *,
        trained: list[tuple[int, int]] = (),
        stale: list[int] = (),
        refused: list[int] = (),
    ) -> OutcomeReceipt:
        """`trained`: (submission id, rows read) of the files step `step` trained on."""
        body = {
            "trained": [{"id": i, "rows": rows} for i, rows in trained],
            "stale": list(stale),
            "refused": list(refused),
        }
        return self._call(OutcomeReceipt, "POST", f"/v1/runs/{run_id}/steps/{step}/outcomes", json_body=body)

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
        return self._call(
            VerdictInfo, "POST", f"/v1/runs/{run_id}/submissions/{submission_id}/audit", json_body=body
        )

    def drain(self, run_id: str) -> RunState:
        """End the run: no new work; it reads `drained` once every submitted file has its verdict."""
        return self._call(RunState, "POST", f"/v1/runs/{run_id}/drain", json_body={})

    def accepted_submissions(self, run_id: str, step: int, *, after_id: int = 0) -> list[SubmissionInfo]:
        return self._call(
            list[SubmissionInfo],
            "GET",
            f"/v1/runs/{run_id}/steps/{step}/accepted",
            params={"after_id": after_id or None},
        )

    # --- reads (public) ------------------------------------------------------------------------------------
    def run_state(self, run_id: str) -> RunState:
        return self._call(RunState, "GET", f"/v1/runs/{run_id}", signed=False)

    def step(self, run_id: str, step: int) -> StepInfo:
        return self._call(StepInfo, "GET", f"/v1/runs/{run_id}/steps/{step}", signed=False)

    def steps(self, run_id: str, *, after_step: int = -1) -> list[StepInfo]:
        return self._call(
            list[StepInfo],
            "GET",
            f"/v1/runs/{run_id}/steps",
            signed=False,
            params={"after_step": after_step if after_step >= 0 else None},
        )

    def nodes(self, run_id: str, *, health: str | None = None) -> list[MemberInfo]:
        return self._call(
            list[MemberInfo], "GET", f"/v1/runs/{run_id}/nodes", signed=False, params={"health": health}
        )

    def node(self, node_id: str) -> NodeInfo:
        return self._call(NodeInfo, "GET", f"/v1/nodes/{node_id}", signed=False)

    def submissions(
        self,
        run_id: str,
        *,
        status: str | None = None,
        step: int | None = None,
        node_id: str | None = None,
        after_id: int = 0,
    ) -> list[SubmissionInfo]:
        params = {"status": status, "step": step, "node_id": node_id, "after_id": after_id or None}
        return self._call(
            list[SubmissionInfo], "GET", f"/v1/runs/{run_id}/submissions", signed=False, params=params
        )

    def verdicts(self, run_id: str, *, step: int | None = None, after_id: int = 0) -> list[VerdictInfo]:
        return self._call(
            list[VerdictInfo],
            "GET",
            f"/v1/runs/{run_id}/verdicts",
            signed=False,
            params={"step": step, "after_id": after_id or None},
        )

    def ledger(
        self, run_id: str, *, node_id: str | None = None, after_id: int = 0, after_node: str = ""
    ) -> LedgerView:
        params = {"node_id": node_id, "after_id": after_id or None, "after_node": after_node or None}
        return self._call(LedgerView, "GET", f"/v1/runs/{run_id}/ledger", signed=False, params=params)

    def work(self, run_id: str, *, node_id: str | None = None, after_node: str = "") -> list[NodeWork]:
        """Per-node counts: units leased and expired, files generated, judged, accepted, trained."""
        params = {"node_id": node_id, "after_node": after_node or None}
        return self._call(list[NodeWork], "GET", f"/v1/runs/{run_id}/work", signed=False, params=params)

    def all_work(self, run_id: str) -> list[NodeWork]:
        """Every page of `work`."""
        rows: list[NodeWork] = []
        while page := self.work(run_id, after_node=rows[-1].node_id if rows else ""):
            rows += page
        return rows

    def units(
        self, run_id: str, *, step: int | None = None, node_id: str | None = None, after_id: int = 0
    ) -> list[UnitInfo]:
        params = {"step": step, "node_id": node_id, "after_id": after_id or None}
        return self._call(list[UnitInfo], "GET", f"/v1/runs/{run_id}/units", signed=False, params=params)

    def step_work(self, run_id: str, step: int) -> StepWork:
        return self._call(StepWork, "GET", f"/v1/runs/{run_id}/steps/{step}/work", signed=False)

    def runs(self) -> list[RunState]:
        """Every run the coordinator holds, newest first."""
        return self._call(list[RunState], "GET", "/v1/runs", signed=False)

    def summary(self, run_id: str) -> RunSummary:
        """What the dashboard shows: step and rate, reward by step, nodes, rejections, validator backlog."""
        return self._call(RunSummary, "GET", f"/v1/runs/{run_id}/summary", signed=False)


def _error_from(response: httpx.Response) -> CoordinatorError:
    try:
        body = response.json()
        return CoordinatorError(response.status_code, str(body["error"]), str(body.get("detail", "")))
    except (ValueError, KeyError, TypeError):
        return CoordinatorError(response.status_code, "http_error", response.text[:500])
