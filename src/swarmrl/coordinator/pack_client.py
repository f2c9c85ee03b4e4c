"""The coordinator's community-pack calls, over any role's `SignedTransport` (`PackClient(client.transport)`).

an author      submit a pack (its archive, a proof-of-work ticket), read where it stands
every node     a step's mix, the archives of the packs in it
a validator    lease a pack to check, post its report, post its scores of a pack unit's file
the trainer    tell what a step did with the pack units' files it read
the operator   set the run's [tasks.community]
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from swarmrl.configs.task_packs import CommunityTasksConfig, PackLimitsConfig
from swarmrl.coordinator.api import Ok
from swarmrl.coordinator.client import RoleClient
from swarmrl.coordinator.pack_api import (
    PackDetail,
    PackInfo,
    PackLease,
    PackMix,
    PackPolicyInfo,
    PackScores,
    PackTraining,
    PackTrainingReceipt,
    TrainedPackFile,
)
from swarmrl.tasks.packs.community import CommunityTasks
from swarmrl.tasks.packs.in_run import RowScores
from swarmrl.tasks.packs.mix import PackShare
from swarmrl.tasks.packs.report import AdmissionReport
from swarmrl.tasks.task import TaskSource


class PackClient(RoleClient):
    # --- an author -------------------------------------------------------------------------------------------
    def submit_pack(self, run_id: str, archive: bytes, ticket: str) -> PackInfo:
        claim = {"sha256": hashlib.sha256(archive).hexdigest(), "size_bytes": len(archive), "ticket": ticket}
        return self.transport.call(
            PackInfo, "PUT", f"/v1/uploads/runs/{run_id}/packs", params=claim, content=archive
        )

    def pack(self, run_id: str, pack_id: int) -> PackDetail:
        return self.transport.call(PackDetail, "GET", f"/v1/runs/{run_id}/packs/{pack_id}", signed=False)

    def packs(
        self, run_id: str, *, status: str | None = None, digest: str | None = None, after_id: int = 0
    ) -> list[PackInfo]:
        params = {"status": status, "digest": digest, "after_id": after_id}
        return self.transport.call(
            list[PackInfo], "GET", f"/v1/runs/{run_id}/packs", params=params, signed=False
        )

    def every_pack(self, run_id: str, *, status: str | None = None) -> list[PackInfo]:
        found: list[PackInfo] = []
        while page := self.packs(run_id, status=status, after_id=found[-1].id if found else 0):
            found += page
        return found

    # --- every node ------------------------------------------------------------------------------------------
    def mix(self, run_id: str, step: int) -> list[PackShare]:
        mix = self.transport.call(PackMix, "GET", f"/v1/runs/{run_id}/packs/mix/{step}", signed=False)
        return [PackShare(**entry.model_dump()) for entry in mix.packs]

    def archive(self, run_id: str, pack_id: int) -> bytes:
        return self.transport.request("GET", f"/v1/runs/{run_id}/packs/{pack_id}/archive").content

    # --- a validator -----------------------------------------------------------------------------------------
    def lease_pack(self, run_id: str) -> PackLease:
        return self.transport.call(PackLease, "POST", f"/v1/runs/{run_id}/packs/lease", json_body={})

    def post_pack_verdict(self, run_id: str, pack_id: int, stage: str, report: AdmissionReport) -> PackDetail:
        body = {"stage": stage, "report": report.model_dump(mode="json")}
        return self.transport.call(
            PackDetail, "POST", f"/v1/runs/{run_id}/packs/{pack_id}/verdict", json_body=body
        )

    def post_scores(self, run_id: str, submission_id: int, pack_id: int, scores: RowScores) -> PackInfo:
        body = PackScores(submission_id=submission_id, pack_id=pack_id, scores=scores)
        return self.transport.call(PackInfo, "POST", f"/v1/runs/{run_id}/packs/scores", json_body=body)

    # --- the trainer -----------------------------------------------------------------------------------------
    def report_training(
        self, run_id: str, step: int, files: Sequence[TrainedPackFile]
    ) -> PackTrainingReceipt:
        body = PackTraining(step=step, files=list(files))
        return self.transport.call(
            PackTrainingReceipt, "POST", f"/v1/runs/{run_id}/packs/trained", json_body=body
        )

    # --- the operator ----------------------------------------------------------------------------------------
    def set_pack_policy(self, run_id: str, policy: CommunityTasksConfig) -> Ok:
        return self.transport.call(
            Ok, "PUT", f"/v1/runs/{run_id}/packs/policy", json_body=policy.model_dump(mode="json"), admin=True
        )

    def pack_policy(self, run_id: str) -> PackPolicyInfo:
        return self.transport.call(PackPolicyInfo, "GET", f"/v1/runs/{run_id}/packs/policy", signed=False)


def community_tasks(
    client: RoleClient, run_id: str, base: TaskSource, limits: PackLimitsConfig
) -> CommunityTasks:
    """The tasks of each unit of the run, as this role's client reads the mix and the packs' archives."""
    packs = PackClient(client.transport)
    return CommunityTasks(
        base,
        run_id,
        limits,
        mix_of=lambda step: packs.mix(run_id, step),
        archive_of=lambda share: packs.archive(run_id, share.pack_id),
    )
