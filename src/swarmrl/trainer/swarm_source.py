"""The trainer's side of a swarm: accepted submissions in; the step counter, the demand for work and what each
step used out.

The coordinator's step counter is the training step nodes generate for. Opening step k lets nodes lease its
units (with a policy no older than k - async_level), and those of k + 1 once k's are all out
(`lease_ahead_steps`); closing step k (all its groups collected) opens k + 1 at once, so nodes generate for
k + 1 while the trainer trains step k, and the work nodes did ahead is waiting for it. The trainer says how
many units a step wants: about as many files as recent steps used, less the accepted files already waiting, more
when it runs dry (every unit delivered and still not enough informative groups). It reads the coordinator's
feed: accepted files of steps k - async_level .. k that no other step used, so work that arrived after its own
step filled still trains while its policy is recent. Each file is downloaded once into
`<run>/accepted/step_j/` (j: the step it was generated for), checked against the sha256 the worker committed to,
and scored again by the trainer's own trusted scorer. Every file also passes the trainer's own checks against
its submission (node, unit, claims, prompts, seeds, sampling, endings); for a file the spot-check draw left
unjudged, what they found is posted to the coordinator before the file trains (`audit`): passed, the file is
credited with the rows and tokens measured here; failed, it never trains and its node is hard-rejected.
Closing a step reports what it did with every file it read (trained, stale, refused); closing the last one
drains the run, so what was submitted is still judged.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from swarmrl.coordinator.api import StepWork, SubmissionInfo
from swarmrl.coordinator.client import TrainerClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.rollouts import RolloutHeader, RolloutRow
from swarmrl.rollouts.checks import CheckFailed, FileOrigin, completion_tokens
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.tasks.task import TaskSource
from swarmrl.trainer.pack_units import PackUnits

log = logging.getLogger(__name__)

DEMAND_SMOOTHING = 0.5  # weight of the last step in the files-per-step estimate


def file_name(submission: SubmissionInfo) -> str:
    return f"{submission.id:08d}-{submission.node_id[:16]}.parquet"


def submission_id(name: str) -> int:
    return int(name.split("-", 1)[0])


def next_demand(files_per_step: float, waiting: int) -> int:
    """Units to lease for the next step: what a step uses, less files already accepted or in flight for it."""
    return max(1, math.ceil(files_per_step) - waiting)


def counted_in_flight(work: StepWork) -> int:
    """Units of a step leased or submitted that are waited for: not a fresh key's (any number of them may hold,
    drop or fill such units with garbage) nor a silent node's (it missed a heartbeat), as the coordinator's
    room counts them."""
    return work.leased + work.submitted - work.unproven - work.silent


class FileChecks(Protocol):
    """The trainer's checks of a file against the unit it was submitted for; `tasks` replaces the run's own task
    source for a community pack's unit."""

    def __call__(
        self, header: RolloutHeader, rows: list[RolloutRow], origin: FileOrigin, *, tasks: TaskSource = ...
    ) -> None: ...


@dataclass
class AcceptedSubmissions:
    client: TrainerClient
    run_id: str
    rundir: RunDir
    async_level: int  # the run's contract.async_level
    units_per_step: int = 8  # first guess of the files a step uses; each closed step refines it
    last_step: int | None = None  # closing this step drains the run instead of opening the next
    # The trainer's checks of a file against its submission (`rollouts.checks.structural_checks`, bound to the
    # run's config, tasks and prompt format); None: only schema, policy age and the trusted scorer.
    checks: FileChecks | None = None
    # Community packs: each unit's tasks (the run's own or a pack's) and how a pack unit's rows are scored and
    # reported (`PackUnits`); None: every unit is the run's own.
    packs: PackUnits | None = None
    files_per_step: float | None = field(default=None, init=False)
    _demanded: set[int] = field(default_factory=set, init=False)  # steps whose demand this trainer set
    # file name → its submission record, for the trainer's checks and its report of them
    _submissions: dict[str, SubmissionInfo] = field(default_factory=dict, init=False)
    _listed: int = field(default=0, init=False)  # the newest submission id the last look at the feed listed

    def directory(self, step: int) -> Path:
        return self.rundir.root / "accepted" / f"step_{step}"

    def _estimate(self) -> float:
        return self.files_per_step if self.files_per_step is not None else float(self.units_per_step)

    def open_step(self, step: int) -> None:
        if step in self._demanded:  # opened by closing the step before, with its demand
            return
        current = self.client.reads.run_state(self.run_id).current_step
        if current < step:
            self.client.publish_step(self.run_id, step, units=self._demand(step))
        elif current == step:  # the first step, or a trainer resumed on the open step
            self.client.set_demand(self.run_id, step, self._demand(step))
        self._demanded.add(step)

    def _demand(self, step: int) -> int:
        """Units `step` should lease: a step's worth of files, less accepted files of earlier steps waiting for
        it and units of those steps in flight and waited for (they carry over when they land). The step's own
        units, leased ahead while the step before it was open, are the coordinator's to count against this
        demand."""
        feed = self.client.training_feed(self.run_id, step)
        waiting = sum(1 for submission in feed if submission.step < step)
        for earlier in range(max(0, step - self.async_level), step):
            work = self.client.reads.step_work(self.run_id, earlier)
            waiting += counted_in_flight(work)
        return next_demand(self._estimate(), waiting)

    def new_files(self, step: int, seen: set[str], prompts_wanted: int) -> list[Path]:
        # A swarm's units are whole batches, leased ahead by the coordinator: its demand follows the files
        # steps used (`files_per_step`), not the feed's estimate in prompts.
        paths = []
        after_id = 0
        while page := self.client.training_feed(self.run_id, step, after_id=after_id):
            for submission in page:
                name = file_name(submission)
                if name in seen or (self.packs is not None and self.packs.on_probation(submission)):
                    continue  # a unit of a pack on probation is measured by validators, never trained
                self._submissions[name] = submission
                path = self.directory(submission.step) / name
                if path.exists() or self._download(submission, path):
                    paths.append(path)
            after_id = page[-1].id
        self._listed = after_id
        if not paths:
            self._top_up(step)
        return paths

    def wait_for_files(self, step: int, seconds: float) -> None:
        """Held at the coordinator until a file is decided (or `seconds` are up): the feed past the files just
        listed may have grown, or a verdict let files through that waited behind a file still being judged."""
        self.client.training_feed(self.run_id, step, after_id=self._listed, wait_s=seconds)

    def _download(self, submission: SubmissionInfo, path: Path) -> bool:
        try:
            data = self.client.fetch_submission(submission)
        except CoordinatorError as exc:
            log.warning("skipping submission %d: %s", submission.id, exc)
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.part")
        partial.write_bytes(data)
        os.replace(partial, path)
        return True

    def _top_up(self, step: int) -> None:
        """Nothing new, nothing in flight, nothing left to lease, and the step is not full: ask for one more."""
        work = self.client.reads.step_work(self.run_id, step)
        if work.open_units == 0 and counted_in_flight(work) == 0:
            try:
                self.client.set_demand(self.run_id, step, work.demand + 1)
            except CoordinatorError as exc:
                if exc.kind != "not_open_step":  # the step moved on meanwhile
                    raise

    # --- the trainer's audit of each file (`trainer.data.FileAudit`) ------------------------------------------
    def check(self, path: Path, header: RolloutHeader, rows: list[RolloutRow]) -> None:
        """The file must be its submission's: the node, unit and claims the coordinator recorded, and the
        prompts, seeds, sampling and endings that unit fixes."""
        submission = self._submissions.get(path.name)
        if submission is None or self.checks is None:
            return
        if (submission.rows, submission.tokens) != (len(rows), completion_tokens(rows)):
            raise CheckFailed(
                "claims",
                f"claimed {submission.rows} rows / {submission.tokens} tokens; the file has {len(rows)} / "
                f"{completion_tokens(rows)}",
            )
        batch = submission.batch_index if submission.batch_index is not None else header.batch_index
        seed = self.client.task_seed(self.run_id, submission.step, batch, node_id=submission.node_id)
        origin = FileOrigin(self.run_id, submission.node_id, submission.step, batch, seed)
        if self.packs is None:
            self.checks(header, rows, origin)
        else:
            self.checks(header, rows, origin, tasks=self.packs.tasks_of(submission))

    def scoring(self, path: Path, rows: list[RolloutRow]) -> dict[str, Any]:
        submission = self._submissions.get(path.name)
        if submission is None or self.packs is None:
            return {}
        return self.packs.scoring(submission, rows)

    def passed(self, path: Path, rows: list[RolloutRow]) -> bool:
        """A file no validator judged is credited with what the trainer measured in it; False when the
        coordinator voided it meanwhile (its node was caught elsewhere): it does not train."""
        return self._report(path, accept=True, check="trainer", reason="", rows=rows)

    def failed(self, path: Path, failure: CheckFailed) -> None:
        self._report(path, accept=False, check=failure.check, reason=failure.reason[:2000], rows=None)

    def _report(
        self, path: Path, *, accept: bool, check: str, reason: str, rows: list[RolloutRow] | None
    ) -> bool:
        submission = self._submissions.get(path.name)
        if submission is None:
            return True
        # A validator judged it: a disagreement is the operator's to see, not a verdict.
        if submission.checked:
            if not accept:
                log.warning(
                    "submission %d, accepted by a validator, fails the trainer's %s check",
                    submission.id,
                    check,
                )
            return True
        measured = {} if rows is None else {"rows": len(rows), "tokens": completion_tokens(rows)}
        try:
            self.client.audit_submission(
                self.run_id, submission.id, accept=accept, check=check, reason=reason, **measured
            )
        except CoordinatorError as exc:
            if exc.kind == "voided":
                return False
            if exc.kind != "already_decided":
                raise
        return True

    def close_step(self, step: int, summary: dict[str, Any], next_prompts: int) -> None:
        outcomes: dict[str, str] = summary.get("outcomes", {})
        rows: dict[str, int] = summary.get("rows_used", {})
        by_outcome = {
            kind: [submission_id(n) for n, o in outcomes.items() if o == kind]
            for kind in ("stale", "refused")
        }
        trained = [(submission_id(n), rows.get(n, 0)) for n, o in outcomes.items() if o == "trained"]
        self.client.report_outcomes(self.run_id, step, trained=trained, **by_outcome)
        if self.packs is not None:
            kept = summary.get("groups_kept", {})
            trained_units = [
                (self._submissions[name], rows.get(name, 0), kept.get(name, 0))
                for name, outcome in outcomes.items()
                if outcome == "trained" and name in self._submissions
            ]
            self.packs.report(step, trained_units)
        used = float(len(trained))
        estimate = self._estimate()
        self.files_per_step = (
            used
            if self.files_per_step is None
            else (DEMAND_SMOOTHING * used + (1 - DEMAND_SMOOTHING) * estimate)
        )
        write_json_atomic(
            self.directory(step) / "COMPLETE", {k: summary[k] for k in ("files", "groups") if k in summary}
        )
        if self.last_step is not None and step >= self.last_step:
            self.client.drain(self.run_id)
            return
        self.client.publish_step(self.run_id, step + 1, units=self._demand(step + 1))
        self._demanded.add(step + 1)

    def should_stop(self) -> bool:
        return self.rundir.should_stop()
