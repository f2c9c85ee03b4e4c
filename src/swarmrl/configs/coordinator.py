"""Settings of the coordinator service: liveness, auth windows, upload limits, ledger policy."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from swarmrl.configs.connections import ConnectionLimits

Severity = Literal["soft", "hard"]
NodeKey = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]

MIB = 1024 * 1024


# Keyed by the validator's check names. Soft: what an honest node can hit by bad luck (a batch that went stale
# in transit, a heuristic flag, a reward the trusted scorer disagrees with); hard: forgery.
_REJECT_SEVERITY: dict[str, Severity] = {
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
    # The validator's per-file time budget: an honest file can run long (slow tools); the file is
    # dropped, its node not punished.
    "time_budget": "soft",
}


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
        100 * MIB,
        ge=1,
        description="largest rollout file a node may upload (bytes): an outer cap; a run's own cap is what its "
        "contract lets one unit's file weigh (rows × the most one row of max_new_tokens can), when smaller",
    )
    uploads_per_hour: int | None = Field(
        None,
        ge=1,
        description="upload slots one node may open per rolling hour (429 with Retry-After beyond it); unset "
        "(the default): no wall-clock cap, only the ones derived from the run's demand — 3 slots per leased "
        "unit and 3 × (the step's units + lease_slack_units) per step — so one node can do a whole run's work",
    )
    upload_slot_ttl_s: float = Field(
        900.0, gt=0, description="seconds an upload slot stays valid; its file must have arrived by then"
    )
    upload_min_bytes_per_s: float = Field(
        256 * 1024,
        gt=0,
        description="slowest upload accepted: a transfer must end within clock_skew_s + size / this rate "
        "of its signed start (and before its slot expires)",
    )
    storage_quota_bytes: int = Field(
        64 * 1024 * MIB, ge=1, description="bytes of uploaded files one run may hold; more gets 507"
    )
    storage_unproven_fraction: float = Field(
        0.1,
        gt=0,
        lt=1,
        description="share of storage_quota_bytes that the files of unproven nodes (fewer than "
        "lease_proven_files accepted) hold together, however many keys they are; proven nodes' files hold the "
        "rest, so no number of fresh keys takes the room an honest node's upload needs",
    )
    # --- work leases (rationed generation) ------------------------------------------------------------------
    default_step_units: int = Field(
        8, ge=1, description="work units leased for a step whose trainer has not said how many it wants"
    )
    lease_slack_units: int = Field(
        1, ge=0, description="units leased beyond the trainer's demand (stragglers, rejections in flight)"
    )
    lease_initial_unit_s: float = Field(
        120.0, gt=0, description="seconds per unit assumed for a node whose speed was not measured yet"
    )
    lease_target_s: float = Field(
        300.0, gt=0, description="a lease holds about as many units as the node finishes in this long"
    )
    lease_max_units: int = Field(4, ge=1, description="most units one lease holds")
    lease_ahead_steps: int = Field(
        1,
        ge=0,
        description="steps past the open one whose units a node may lease once the open step's are all out "
        "(at most async_level - 1, so a policy the window allows exists): nodes that would wait for the open "
        "step's stragglers generate the next step's work instead, and the trainer finds it waiting",
    )
    lease_deadline_factor: float = Field(
        2.0, ge=1.0, description="a unit's deadline allows this many times the node's measured time"
    )
    lease_grace_s: float = Field(30.0, ge=0, description="seconds added to every unit's deadline")
    speed_smoothing: float = Field(
        0.3, gt=0, le=1, description="weight of the newest measurement in a node's seconds-per-unit average"
    )
    standing_drop_grace: int = Field(
        8, ge=0, description="expired units a node may drop before its drop rate costs it standing"
    )
    standing_max_drop_fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="past the grace, a node that dropped more than this fraction of its units gets no lease",
    )
    lease_proven_files: int = Field(
        1,
        ge=0,
        description="files of a node a validator judged and accepted in a run before it is proven there: an "
        "unproven node holds at most one unit at a time and shares the unproven pool (identities are free, "
        "so only measured work earns more)",
    )
    lease_unproven_fraction: float = Field(
        0.25,
        gt=0,
        le=1,
        description="while any proven node is alive, unproven nodes together hold at most this fraction of a "
        "step's units (at least one); the rest waits for proven nodes, shared among them alone",
    )
    lease_pool_ticket_bits: int = Field(
        22,
        ge=0,
        le=40,
        description="while the unproven pool is contested (one of its units lapsed or was rejected within "
        "lease_pool_ticket_window_s), a node without accepted work needs a proof-of-work ticket of this many "
        "leading zero bits for each pool unit (about 2^bits SHA-256 hashes: 22 is a few seconds of one core), so "
        "squatting costs compute per unit held, not a free key; 0: never",
    )
    lease_pool_ticket_window_s: float = Field(
        600.0,
        gt=0,
        description="how long a pool unit that lapsed or was rejected keeps the unproven pool contested; also the "
        "period a ticket's challenge is good for (it and the next), so tickets cannot be stocked up in advance",
    )
    lease_trusted_files: int = Field(
        4,
        ge=0,
        description="files of a node a validator judged and accepted in a run before it is trusted there (at "
        "least lease_proven_files): while any trusted node is alive, the step's demand is shared among trusted "
        "nodes alone, and proven nodes below this share the low-trust pool, each holding at most as many units "
        "as it had files accepted (keys are free: one accepted file must not buy a long-standing node's rights)",
    )
    lease_low_trust_fraction: float = Field(
        0.25,
        gt=0,
        le=1,
        description="while any trusted node is alive, proven but not yet trusted nodes together hold at most this "
        "fraction of a step's units (at least one), extra to its demand: nobody waits for them",
    )
    worker_allow_list: list[str] = Field(
        default_factory=list,
        description="node ids (hex public keys) the operator admits as workers; empty (the default): any key "
        "may join. A closed swarm: no free key can join to hold or squat on the unproven pool",
    )
    lease_max_deadline_s: float = Field(
        300.0,
        gt=0,
        description="no unit's deadline is further than this from its lease, however slow the node measured "
        "(must be below the trainer's max_wait_seconds: no step waits on one node past the trainer's give-up; "
        "left unset in a run config whose give-up is shorter, half of it)",
    )
    # --- validation --------------------------------------------------------------------------------------------
    validation_lease_s: float = Field(
        300.0, gt=0, description="seconds a validator holds a file before another validator may take it"
    )
    spot_check_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="fraction of files judged (1: all); the rest are accepted unchecked, and any hard "
        "rejection bans the node and wipes its unpaid credit",
    )
    spot_check_probation_files: int = Field(
        16,
        ge=0,
        description="in spot-check mode, a node's files are all judged until this many of them were judged and "
        "accepted in the run; must exceed (1 - p) / p so that cheating straight after probation loses more "
        "credit than it can gain (README, spot-check section)",
    )
    credit_unlock_window_s: float = Field(
        86400.0, ge=0, description="accepted work stays pending (can still be wiped) this long, then unlocks"
    )
    hard_rejects_before_ban: int = Field(
        1, ge=1, description="hard rejections of one node after which its key is banned from every run"
    )
    reject_severity: dict[str, Severity] = Field(
        default_factory=_REJECT_SEVERITY.copy,
        description="validator check name → soft (drop this submission's units) or hard (wipe pending, eject)",
    )
    default_reject_severity: Severity = Field(
        "hard", description="severity of a rejection whose check name is not in reject_severity"
    )
    list_limit: int = Field(500, ge=1, le=10000, description="most rows a list endpoint returns per call")
    operator_relays: list[NodeKey] = Field(
        default_factory=list,
        description="node ids (public keys, 64 hex digits) of the SHARDCAST relays the operator runs: always "
        "listed, first, in the relays panel, the tree and the nodes table, and marked as the operator's; any "
        "other relay's report is its own claim, ranked below",
    )
    connections: ConnectionLimits = Field(
        default_factory=ConnectionLimits,
        description="slow-client limits of the HTTP server: request head/body deadlines, open-connection caps",
    )

    @model_validator(mode="after")
    def _trusted_after_proven(self) -> CoordinatorConfig:
        if self.lease_trusted_files < self.lease_proven_files:
            raise ValueError(
                f"lease_trusted_files {self.lease_trusted_files} must be >= lease_proven_files "
                f"{self.lease_proven_files}: a trusted node is a proven one"
            )
        return self

    @model_validator(mode="after")
    def _dead_after_unhealthy(self) -> CoordinatorConfig:
        if self.dead_after_missed < self.unhealthy_after_missed:
            raise ValueError("dead_after_missed must be >= unhealthy_after_missed")
        return self

    @model_validator(mode="after")
    def _probation_outweighs_a_cheat(self) -> CoordinatorConfig:
        p = self.spot_check_fraction
        if p < 1.0 and self.spot_check_probation_files <= (1.0 - p) / p:
            raise ValueError(
                f"spot_check_probation_files = {self.spot_check_probation_files} must exceed (1 - p) / p = "
                f"{(1.0 - p) / p:.2f} at spot_check_fraction p = {p}: a fresh identity could then profit from "
                "cheating right after probation"
            )
        return self

    def severity_of(self, check: str) -> Severity:
        return self.reject_severity.get(check, self.default_reject_severity)
