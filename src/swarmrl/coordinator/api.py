"""The coordinator's wire schema: every request and response body, shared by the service and the client."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

HexKey = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$", min_length=64, max_length=64)]
Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$", min_length=64, max_length=64)]
RunId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
Step = Annotated[int, Field(ge=0, le=2**31 - 1)]
RowId = Annotated[int, Field(ge=1, le=2**62)]
SlotId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
Count = Annotated[int, Field(ge=0, le=2**53)]
CheckName = Annotated[str, StringConstraints(min_length=1, max_length=64)]
SubmissionStatus = Literal["pending", "accepted", "rejected"]
LedgerStatus = Literal["pending", "unlocked", "wiped"]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    error: str = Field(description="machine-readable kind, e.g. unsigned, replayed_nonce, banned")
    detail: str = Field(description="what exactly was wrong")


# --- admin / trainer ---------------------------------------------------------------------------------------
class CreateRun(Body):
    run_id: RunId
    trainer_public_key: HexKey
    async_level: Annotated[int, Field(ge=0, le=1000)] = 2
    run_secret: Annotated[str, StringConstraints(max_length=128)] | None = Field(
        None, description="keys the task seeds; generated when absent, never shown to nodes"
    )


class AddValidator(Body):
    public_key: HexKey


class SetStep(Body):
    step: Step


class BanRequest(Body):
    node_id: HexKey
    reason: Annotated[str, StringConstraints(max_length=1000)] = "banned by admin"


class PublishStep(Body):
    step: Step
    manifest_sha256: Sha256Hex | None = None
    manifest_url: Annotated[str, StringConstraints(max_length=2000)] | None = None


# --- nodes ---------------------------------------------------------------------------------------------------
class RegisterNode(Body):
    hardware: dict[str, Any] = Field(default_factory=dict, description="declared, informational only")


class Heartbeat(Body):
    policy_step: Step | None = Field(None, description="checkpoint step the node has loaded")


class UploadRequest(Body):
    step: Step
    sha256: Sha256Hex
    size_bytes: Annotated[int, Field(ge=1, le=2**53)]


class SubmitWork(Body):
    slot_id: SlotId
    sha256: Sha256Hex
    step: Step
    rows: Count
    tokens: Count


class VerdictRequest(Body):
    accept: bool
    check: CheckName = Field(description="the validator check that decided; maps to soft/hard on rejection")
    reason: Annotated[str, StringConstraints(max_length=4000)] = ""
    rewards_summary: dict[str, Any] = Field(
        default_factory=dict,
        description="trusted per-row rewards/advantages summary computed by the validator",
    )


# --- responses -----------------------------------------------------------------------------------------------
class RunState(BaseModel):
    run_id: str
    trainer_public_key: str
    async_level: int
    current_step: int
    manifest_sha256: str | None = None
    manifest_url: str | None = None


class RunCreated(RunState):
    run_secret: str


class StepInfo(BaseModel):
    step: int
    manifest_sha256: str | None
    manifest_url: str | None
    published_at: float


class NodeInfo(BaseModel):
    node_id: str
    hardware: dict[str, Any]
    registered_at: float
    hard_rejects: int
    banned: bool


class MemberInfo(BaseModel):
    node_id: str
    status: str
    health: Literal["healthy", "unhealthy", "dead"]
    joined_at: float
    last_seen: float
    heartbeats: int
    policy_step: int | None


class HeartbeatAck(BaseModel):
    current_step: int
    async_level: int
    min_policy_step: int = Field(description="oldest checkpoint step a node may still generate with")
    next_heartbeat_s: float


class SeedInfo(BaseModel):
    run_id: str
    node_id: str
    step: int
    batch_index: int
    seed: int


class UploadSlotInfo(BaseModel):
    slot_id: str
    upload_path: str = Field(description="PUT the file here (signed) when upload_url is null")
    upload_url: str | None = Field(
        None, description="presigned URL of the storage backend: PUT the file there directly, unsigned"
    )
    max_bytes: int
    expires_at: float


class UploadReceipt(BaseModel):
    slot_id: str
    sha256: str
    size_bytes: int


class SubmissionInfo(BaseModel):
    id: int
    run_id: str
    node_id: str
    step: int
    sha256: str
    size_bytes: int
    rows: int
    tokens: int
    status: SubmissionStatus
    submitted_at: float
    file_path: str


class VerdictInfo(BaseModel):
    submission_id: int
    node_id: str
    step: int
    validator_key: str
    accepted: bool
    check: str
    reason: str
    severity: str | None
    rewards_summary: dict[str, Any]
    decided_at: float


class LedgerEntryInfo(BaseModel):
    id: int
    node_id: str
    submission_id: int
    tokens: int
    samples: int
    status: LedgerStatus
    credited_at: float
    unlock_at: float


class LedgerBalance(BaseModel):
    node_id: str
    pending_tokens: int = 0
    pending_samples: int = 0
    unlocked_tokens: int = 0
    unlocked_samples: int = 0
    wiped_tokens: int = 0
    wiped_samples: int = 0


class LedgerView(BaseModel):
    balances: list[LedgerBalance]
    entries: list[LedgerEntryInfo]


class Ok(BaseModel):
    ok: bool = True
