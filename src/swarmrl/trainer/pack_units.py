"""The trainer's side of community packs in a swarm: which tasks each unit's file answers (the run's own, or a
pack's rows, as the step's mix says), the pack verifier's rewards of a pack unit's rows (scored again here, in
the trainer's own sandbox, never taken from a validator), and what each step did with the pack units' files.

After a step, each pack unit's file it trained is told to the coordinator: the trainer's scores (compared there
with the validator's: a verifier that scores alike on every judge is deterministic), the groups its online
filter was offered and kept, and the rows trained in those informative groups, which is what the pack's author
is credited. The same lines go to `<run>/packs_trained.jsonl`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarmrl.configs.tasks import TasksConfig
from swarmrl.coordinator.api import SubmissionInfo
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.pack_api import TrainedPackFile
from swarmrl.coordinator.pack_client import PackClient
from swarmrl.rollouts import RolloutRow
from swarmrl.rollouts.pack_scoring import judge_pack_rows
from swarmrl.tasks.packs.community import CommunityTasks, UnitTasks
from swarmrl.tasks.packs.in_run import JudgedFile
from swarmrl.tasks.task import TaskSource

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


class PackUnits:
    def __init__(
        self,
        community: CommunityTasks,
        client: PackClient,
        tokenizer: PreTrainedTokenizerBase,
        tasks: TasksConfig,
        group_size: int,
        async_level: int,
        log_path: Path,
    ) -> None:
        self.community, self.client, self.tokenizer, self.tasks = community, client, tokenizer, tasks
        self.group_size, self.async_level, self.log_path = group_size, async_level, log_path
        self._judged: dict[int, tuple[int, int, JudgedFile]] = {}  # submission → (step, pack id, scores)

    def unit(self, submission: SubmissionInfo) -> UnitTasks:
        return self.community.unit(submission.step, submission.batch_index)

    def on_probation(self, submission: SubmissionInfo) -> bool:
        return self.unit(submission).on_probation

    def tasks_of(self, submission: SubmissionInfo) -> TaskSource:
        return self.unit(submission).tasks

    def scoring(self, submission: SubmissionInfo, rows: list[RolloutRow]) -> dict[str, Any]:
        """For a pack unit's file: its tasks and the rewards the pack's verifier gives its rows here."""
        unit = self.unit(submission)
        if unit.pack is None or unit.share is None:
            return {}
        judged = judge_pack_rows(unit.pack, rows, self.tokenizer, self.tasks)
        self._judged[submission.id] = (submission.step, unit.share.pack_id, judged)
        return {"tasks": unit.tasks, "env_rewards": list(judged.rewards)}

    def report(self, step: int, used: list[tuple[SubmissionInfo, int, int]]) -> None:
        """Tell the coordinator what `step` did with its pack units' files: (submission, rows offered to the
        online filter, groups it kept) each."""
        files = [
            TrainedPackFile(
                submission_id=submission.id,
                pack_id=self._judged[submission.id][1],
                scores=self._judged[submission.id][2].by_row(),
                groups=rows // self.group_size,
                kept=kept,
                rows_trained=kept * self.group_size,
            )
            for submission, rows, kept in used
            if submission.id in self._judged
        ]
        oldest = step - self.async_level  # a file of an older step never trains: its scores are not wanted
        for old in [sid for sid, (judged_step, _, _) in self._judged.items() if judged_step < oldest]:
            del self._judged[old]
        if not files:
            return
        with self.log_path.open("a") as lines:
            for file in files:
                lines.write(json.dumps({"step": step, **file.model_dump(exclude={"scores"})}) + "\n")
        try:
            receipt = self.client.report_training(self.community.run_id, step, files)
        except CoordinatorError as exc:  # the step trained; the authors miss this step's credit
            if exc.kind != "already_recorded":  # a retry whose first answer was lost
                log.warning("step %d: pack training not recorded: %s", step, exc)
            return
        for file in files:
            self._judged.pop(file.submission_id, None)
        if receipt.retired:
            log.info("step %d: pack(s) %s retired by what the run measured", step, receipt.retired)
