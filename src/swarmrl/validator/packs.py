"""A validator's share of community-pack admission: lease a pack, check it, post the report with every figure.

Check stage: the pack's archive runs every admission check (`tasks/packs/admission.py`) with this validator's
own salt (drawn once, kept in its work dir: no author can learn it), the run's held-out evals and every pack
already past its checks (`NearDuplicateStore`), stopping at the first failure. A pack that passes everything
the offline checks can decide goes on probation: its rows join the mix in the probation share, are generated
by workers like any unit and judged by validators, and never train. Measure stage: once enough of its rows
were measured, the run's policy on them (per row, samples and samples its verifier passed, from those leased
rollouts) decides `useful`, and `solvable` for a pack without references; the report is posted whole.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from pathlib import Path

from swarmrl.configs import RunConfig
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.pack_api import PackInfo, PackLease, RowMeasurement
from swarmrl.coordinator.pack_client import PackClient
from swarmrl.tasks.packs import checks
from swarmrl.tasks.packs.admission import AdmissionContext, check_pack
from swarmrl.tasks.packs.checks import PolicyMeasurement
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.files import archive_files
from swarmrl.tasks.packs.held_out import NearDuplicateStore
from swarmrl.tasks.packs.pack import TaskPack, pack_from_files
from swarmrl.tasks.packs.report import AdmissionReport, verdict_of

log = logging.getLogger(__name__)

PAST_CHECKS = ("probation", "measuring", "admitted", "retired")  # packs a new one must not copy
DEFAULT_BAND = (0.1, 0.8)


class PackChecker:
    def __init__(self, client: PackClient, run_id: str, config: RunConfig, work_dir: Path) -> None:
        self.client, self.run_id, self.config = client, run_id, config
        self.admission = config.tasks.community.admission
        self.salt = _own_salt(work_dir / "packs" / "salt")
        self.store = NearDuplicateStore(
            work_dir / "packs" / "near_duplicates.pickle",
            self.admission.thresholds.near_duplicate_jaccard,
            config.tasks,
        )
        self._packs: dict[str, TaskPack] = {}

    def check_one(self) -> bool:
        """Lease one pack, judge the stage it is at and post the report; False when none waits."""
        lease = self.client.lease_pack(self.run_id)
        if lease.pack is None or lease.stage is None:
            return False
        started = time.monotonic()
        report = self._check(lease.pack) if lease.stage == "check" else self._decide(lease)
        decided = self.client.post_pack_verdict(self.run_id, lease.pack.id, lease.stage, report)
        log.info(
            "pack %d (%s) %s stage: %s in %.1f s",
            decided.id,
            decided.label,
            lease.stage,
            decided.status if decided.refused_by is None else f"refused by {decided.refused_by}",
            time.monotonic() - started,
        )
        return True

    def _check(self, info: PackInfo) -> AdmissionReport:
        started = time.monotonic()
        try:
            pack = self._load(info)
        except PackError as exc:
            refused = [checks.loads_refused(str(exc))]
            return AdmissionReport(
                pack=info.label, author=info.author, digest=info.digest, verdict="refused", refused_by="loads",
                checks=refused, seconds=time.monotonic() - started,
            )  # fmt: skip
        others = [self._load(other) for other in self._past_checks() if other.id != info.id]
        context = AdmissionContext(
            config=self.admission,
            code=self.config.tasks.code,
            extraction=self.config.tasks.extraction,
            held_out=self.store.index(others),
            band=self.config.tasks.solve_rate_band or DEFAULT_BAND,
            salt=self.salt,
            stop_early=True,
        )
        return check_pack(pack, context, started)

    def _decide(self, lease: PackLease) -> AdmissionReport:
        """The last verdict: the check stage's report with `useful` (and, without references, `solvable`) from
        the run's policy on the rows measured."""
        assert lease.pack is not None
        started = time.monotonic()
        pack = self._load(lease.pack)
        stored = self.client.pack(self.run_id, lease.pack.id).report
        assert stored is not None  # a pack is measured only after its check stage's report
        policy = measured_policy(pack, lease.measurement, self.admission.thresholds.pass_k)
        thresholds, band = self.admission.thresholds, self.config.tasks.solve_rate_band or DEFAULT_BAND
        decided = [checks.useful(policy, band, thresholds)]
        if not pack.references:
            decided.append(checks.solvable_by_policy(policy, thresholds))
        names = {check.name for check in decided}
        results = [check for check in stored.checks if check.name not in names] + decided
        verdict, refused_by = verdict_of(results)
        return stored.model_copy(
            update={
                "checks": results,
                "verdict": verdict,
                "refused_by": refused_by,
                "seconds": stored.seconds + time.monotonic() - started,
            }
        )

    def _past_checks(self) -> list[PackInfo]:
        return [info for info in self.client.every_pack(self.run_id) if info.status in PAST_CHECKS]

    def _load(self, info: PackInfo) -> TaskPack:
        if info.digest not in self._packs:
            limits = self.admission.limits
            pack = pack_from_files(
                archive_files(self.client.archive(self.run_id, info.id), info.label, limits), limits
            )
            if pack.digest != info.digest:
                raise PackError(f"{info.label}: the archive served is not the pack submitted ({pack.digest})")
            self._packs[info.digest] = pack
        return self._packs[info.digest]


def measured_policy(pack: TaskPack, measurement: list[RowMeasurement], pass_k: int) -> PolicyMeasurement:
    """The run's policy on the pack's rows (by row id), k capped by the fewest samples of a row."""
    samples = {pack.rows[m.row].row_id: (m.samples, m.passed) for m in measurement if m.row < len(pack.rows)}
    fewest = min((n for n, _ in samples.values()), default=pass_k)
    return PolicyMeasurement(k=max(1, min(pass_k, fewest)), samples=samples)


def _own_salt(path: Path) -> int:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(secrets.randbits(62)))
    return int(path.read_text())


class PackCheckerThread(threading.Thread):
    """Checks packs beside the file judging, so a long admission never holds a rollout file's verdict."""

    def __init__(self, checker: PackChecker, stop: threading.Event, poll_seconds: float = 2.0) -> None:
        super().__init__(name="pack-checker", daemon=True)
        self.checker, self.stop, self.poll_seconds = checker, stop, poll_seconds

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                busy = self.checker.check_one()
            except (CoordinatorError, PackError) as exc:
                log.warning("pack admission: %s", exc)
                busy = False
            except Exception:  # a bug here must not take the file judging down with it
                log.exception("pack admission failed")
                busy = False
            if not busy:
                self.stop.wait(self.poll_seconds)
