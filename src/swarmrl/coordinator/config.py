"""Settings of the coordinator service: liveness, auth windows, upload limits, ledger policy."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarmrl.httpserve.limits import ConnectionLimits

Severity = Literal["soft", "hard"]

MIB = 1024 * 1024


class CoordinatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    heartbeat_interval_s: float = Field(
        10.0, gt=0, description="seconds between the heartbeats a node must send"
    )
    heartbeat_grace_s: float = Field(
        2.0,
        ge=0,
        description="slack added to a heartbeat's due time before it counts as missed (network jitter)",
    )
    unhealthy_after_missed: int = Field(
        1, ge=1, description="missed heartbeats after which a node is unhealthy"
    )
    dead_after_missed: int = Field(
        3,
        ge=1,
        description="missed heartbeats after which a node is dead and ejected from the run (INTELLECT-2: 3)",
    )
    clock_skew_s: float = Field(
        30.0, gt=0, description="a signed request's timestamp may differ from server time by at most this"
    )
    requests_per_minute: int = Field(
        600, ge=1, description="per-node request budget (token bucket refilled continuously); excess gets 429"
    )
    max_request_body_bytes: int = Field(
        1 * MIB,
        ge=1024,
        description="largest JSON request body (uploads have their own cap); larger gets 413",
    )
    upload_max_bytes: int = Field(
        100 * MIB, ge=1, description="largest rollout file a node may upload (bytes)"
    )
    uploads_per_hour: int = Field(120, ge=1, description="upload slots one node may open per rolling hour")
    upload_slot_ttl_s: float = Field(900.0, gt=0, description="seconds an unused upload slot stays valid")
    credit_unlock_window_s: float = Field(
        86400.0, ge=0, description="accepted work stays pending (can still be wiped) this long, then unlocks"
    )
    hard_rejects_before_ban: int = Field(
        1, ge=1, description="hard rejections of one node after which its key is banned from every run"
    )
    reject_severity: dict[str, Severity] = Field(
        # Keyed by the validator's check names. Soft: what an honest node can hit by bad luck (a batch that
        # went stale in transit, a heuristic flag, a reward the trusted scorer disagrees with); hard: forgery.
        default_factory=lambda: {
            "claims": "hard",
            "upload_hash": "hard",
            "file_missing": "soft",
            "schema_and_signature": "hard",
            "node": "hard",
            "duplicate": "hard",
            "async_window": "soft",
            "assigned_prompts": "hard",
            "sampling_params": "hard",
            "termination_format": "hard",
            "prefill": "hard",
            "toploc": "hard",
            "logprobs": "hard",
            "seeded_sampling": "hard",
            "termination": "soft",
            "rewards": "soft",
        },
        description="validator check name → soft (drop this submission's units) or hard (wipe pending, eject)",
    )
    default_reject_severity: Severity = Field(
        "hard", description="severity of a rejection whose check name is not in reject_severity"
    )
    list_limit: int = Field(500, ge=1, le=10000, description="most rows a list endpoint returns per call")
    connections: ConnectionLimits = Field(
        default_factory=ConnectionLimits,
        description="slow-client limits of the HTTP server: request head/body deadlines, open-connection caps",
    )

    @model_validator(mode="after")
    def _dead_after_unhealthy(self) -> CoordinatorConfig:
        if self.dead_after_missed < self.unhealthy_after_missed:
            raise ValueError("dead_after_missed must be >= unhealthy_after_missed")
        return self

    def severity_of(self, check: str) -> Severity:
        return self.reject_severity.get(check, self.default_reject_severity)
