"""What the trainer reports for the dashboard alone: its per-step scalars (loss, reward, held-out evals).

Nothing here steers the run; a report is stored as the trainer sent it and shown on `/dashboard`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from swarmrl.coordinator.api import MAX_METRICS, MetricPoint, RunId, Step, StepMetrics
from swarmrl.coordinator.errors import ConflictError
from swarmrl.coordinator.server.access import get_run, require_trainer_or_admin
from swarmrl.coordinator.server.auth import SignedCaller, state_of
from swarmrl.coordinator.store.db import TrainerMetrics

router = APIRouter(tags=["trainer"])


@router.post("/v1/runs/{run_id}/steps/{step}/metrics", response_model=MetricPoint)
def report_metrics(
    run_id: RunId, step: Step, body: StepMetrics, request: Request, who: SignedCaller
) -> MetricPoint:
    """The trainer's scalars for policy step `step`, merged into those it reported before (an eval may land
    after the step's training figures); returns everything now held for the step."""
    state = state_of(request)
    with state.sessions() as session, session.begin():
        require_trainer_or_admin(get_run(session, run_id), who)
        row = session.get(TrainerMetrics, (run_id, step))
        if row is None:
            row = TrainerMetrics(run_id=run_id, step=step, metrics={})
            session.add(row)
        merged = {**row.metrics, **body.metrics}
        if len(merged) > MAX_METRICS:
            raise ConflictError(
                f"step {step} would hold {len(merged)} metrics; at most {MAX_METRICS}",
                kind="too_many_metrics",
            )
        row.metrics, row.reported_at = merged, state.clock()
        return MetricPoint(step=step, metrics=merged)
