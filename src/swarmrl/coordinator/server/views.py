"""Database rows → wire models."""

from __future__ import annotations

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import (
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
    return RunState(
        run_id=run.run_id,
        trainer_public_key=run.trainer_public_key,
        async_level=run.async_level,
        current_step=run.current_step,
        status="drained" if run.status == "draining" and drained else run.status,
        manifest_sha256=step.manifest_sha256 if step else None,
        manifest_url=step.manifest_url if step else None,
    )


def step_info(step: Step) -> StepInfo:
    return StepInfo(
        step=step.step,
        manifest_sha256=step.manifest_sha256,
        manifest_url=step.manifest_url,
        published_at=step.published_at,
    )


def node_info(node: Node, banned: bool) -> NodeInfo:
    return NodeInfo(
        node_id=node.node_id,
        hardware=node.hardware or {},
        registered_at=node.registered_at,
        hard_rejects=node.hard_rejects,
        banned=banned,
    )


def member_info(member: Membership, now: float, config: CoordinatorConfig) -> MemberInfo:
    health = health_of(member.last_seen, now, config).value if member.status == "active" else "dead"
    return MemberInfo(
        node_id=member.node_id,
        status=member.status,
        health=health,
        joined_at=member.joined_at,
        last_seen=member.last_seen,
        heartbeats=member.heartbeats,
        policy_step=member.policy_step,
    )


def submission_info(submission: Submission) -> SubmissionInfo:
    return SubmissionInfo(
        id=submission.id,
        run_id=submission.run_id,
        node_id=submission.node_id,
        step=submission.step,
        sha256=submission.sha256,
        size_bytes=submission.size_bytes,
        rows=submission.rows,
        tokens=submission.tokens,
        status=submission.status,
        submitted_at=submission.submitted_at,
        file_path=f"/v1/submissions/{submission.id}/file",
        batch_index=submission.batch_index,
        checked=submission.checked,
        judge_key=submission.judge_key,
        used_step=submission.used_step,
        use_outcome=submission.use_outcome,
        used_rows=submission.used_rows,
    )


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
    return LedgerEntryInfo(
        id=entry.id,
        node_id=entry.node_id,
        submission_id=entry.submission_id,
        tokens=entry.tokens,
        samples=entry.samples,
        status=entry.status,
        credited_at=entry.credited_at,
        unlock_at=entry.unlock_at,
    )


def unit_info(unit: WorkUnit) -> UnitInfo:
    return UnitInfo(
        id=unit.id,
        step=unit.step,
        batch_index=unit.batch_index,
        node_id=unit.node_id,
        status=unit.status,
        leased_at=unit.leased_at,
        expires_at=unit.expires_at,
        submission_id=unit.submission_id,
    )
