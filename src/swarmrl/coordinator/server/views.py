"""Database rows → wire models (read by attribute where the names match: `api.Row`)."""

from __future__ import annotations

from typing import cast

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import (
    HealthName,
    LedgerEntryInfo,
    MemberInfo,
    NodeInfo,
    RunState,
    StepInfo,
    SubmissionInfo,
    UnitInfo,
    VerdictInfo,
)
from swarmrl.coordinator.rules.health import health_of
from swarmrl.coordinator.store.db import (
    LedgerEntry,
    Membership,
    Node,
    Run,
    Step,
    Submission,
    Verdict,
    WorkUnit,
)


def run_state(run: Run, step: Step | None, *, drained: bool = False) -> RunState:
    return RunState.model_validate(run).model_copy(
        update={
            "status": "drained" if run.status == "draining" and drained else run.status,
            "manifest_sha256": step.manifest_sha256 if step else None,
            "manifest_url": step.manifest_url if step else None,
        }
    )


def step_info(step: Step) -> StepInfo:
    return StepInfo.model_validate(step)


def node_info(node: Node, banned: bool) -> NodeInfo:
    return NodeInfo.model_validate(node).model_copy(update={"banned": banned})


def member_info(member: Membership, now: float, config: CoordinatorConfig) -> MemberInfo:
    health = health_of(member.last_seen, now, config).value if member.status == "active" else "dead"
    return MemberInfo(
        node_id=member.node_id,
        status=member.status,
        health=cast(HealthName, health),  # a Health value
        joined_at=member.joined_at,
        last_seen=member.last_seen,
        heartbeats=member.heartbeats,
        policy_step=member.policy_step,
    )


def submission_info(submission: Submission) -> SubmissionInfo:
    return SubmissionInfo.model_validate(submission)


def verdict_info(verdict: Verdict, submission: Submission) -> VerdictInfo:
    return VerdictInfo(
        submission_id=verdict.submission_id,
        node_id=submission.node_id,
        step=submission.step,
        validator_key=verdict.validator_key,
        accepted=verdict.accepted,
        check=verdict.check_name,
        reason=verdict.reason,
        severity=verdict.severity,
        rewards_summary=verdict.rewards_summary or {},
        decided_at=verdict.decided_at,
    )


def ledger_entry_info(entry: LedgerEntry) -> LedgerEntryInfo:
    return LedgerEntryInfo.model_validate(entry)


def unit_info(unit: WorkUnit) -> UnitInfo:
    return UnitInfo.model_validate(unit)
