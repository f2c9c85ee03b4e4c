"""The coordinator's wire schema for community task packs (`server/routes/packs*.py`, `pack_client.py`).

A pack's author submits its archive; validators lease packs to check and post an `AdmissionReport`
(`tasks/packs/report.py`) per stage; every node reads a step's mix and the archives of the packs in it;
validators and the trainer tell what they measured of each pack's completions in a file.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from swarmrl.coordinator.api import Body, Count, RowId, Sha256Hex, Step, TicketNonce
from swarmrl.tasks.packs.report import AdmissionReport

PackStatus = Literal["pending", "checking", "probation", "measuring", "admitted", "refused", "retired"]
Stage = Literal["check", "measure"]
PackRowIndex = Annotated[int, Field(ge=0, le=1_000_000)]
Score = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None
MAX_FILE_COMPLETIONS = 65_536  # of one pack in one file: rows × group size, far above any unit's


class PackUpload(Body):
    """The query of a submission: the archive's sha256 and size (the request's signature covers them, so the
    bytes must match), and the proof-of-work ticket (`tasks/packs/ticket.py`)."""

    sha256: Sha256Hex
    size_bytes: int = Field(ge=1, le=1 << 31)
    ticket: TicketNonce


class PackCredits(BaseModel):
    pending_rows: int = 0
    unlocked_rows: int = 0
    wiped_rows: int = 0


class PackInfo(BaseModel):
    """A pack as anyone may read it: where admission stands, each check's status, what the run measured."""

    id: int
    run_id: str
    digest: str
    author: str
    label: str
    rows: int
    status: PackStatus
    lane: str | None = Field(None, description="whose validator time checked it: earned | newcomers")
    submitted_at: float
    decided_at: float | None
    retired_at: float | None
    refused_by: str | None
    reason: str | None = Field(None, description="why it was refused or retired, one line")
    checks: dict[str, str] = Field(default_factory=dict, description="each admission check's status")
    admission_seconds: float = Field(description="validator time its admission took (measured, charged)")
    completions: int = Field(description="completions of its rows a validator judged in the run")
    failed: int = Field(description="of those, the ones its verifier failed on")
    disagreements: int = Field(description="files a validator and the trainer scored differently")
    groups_seen: int = Field(description="groups of its rows the trainer's online filter was offered")
    groups_kept: int = Field(description="of those, informative ones: trained on")
    rows_trained: int
    credit: PackCredits = Field(default_factory=PackCredits, description="its author's credit for it")


class PackDetail(PackInfo):
    report: AdmissionReport | None = Field(None, description="the validators' admission report")


class RowMeasurement(BaseModel):
    row: PackRowIndex
    samples: Count
    passed: Count


class PackLease(BaseModel):
    pack: PackInfo | None = Field(description="the pack to check; null: none is waiting within the budgets")
    stage: Stage | None = None
    expires_at: float | None = None
    measurement: list[RowMeasurement] = Field(
        default_factory=list, description="measure stage: the run's policy on its rows, from leased rollouts"
    )


class PackVerdict(Body):
    stage: Stage
    report: AdmissionReport


class PackShareInfo(BaseModel):
    pack_id: int
    digest: str
    author: str
    share: float
    probation: bool


class PackMix(BaseModel):
    step: int
    packs: list[PackShareInfo]


RowScores = list[tuple[PackRowIndex, Annotated[list[Score], Field(max_length=4096)]]]


class PackScores(Body):
    """A trusted judge's scores of the pack completions of one file (null: its verifier failed on it)."""

    submission_id: RowId
    pack_id: RowId
    scores: Annotated[RowScores, Field(max_length=4096)]


class TrainedPackFile(PackScores):
    groups: Count = Field(description="groups of the file offered to the online filter")
    kept: Count = Field(description="of those, informative ones, trained on")
    rows_trained: Count


class PackTraining(Body):
    step: Step
    files: Annotated[list[TrainedPackFile], Field(max_length=1000)]


class PackTrainingReceipt(BaseModel):
    recorded: int
    retired: list[int] = Field(default_factory=list, description="packs these files retired")


class PackPolicyInfo(BaseModel):
    run_id: str
    policy: dict = Field(description="the run's [tasks.community]")
    set_at: float
