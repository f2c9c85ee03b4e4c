"""The rows of a community pack's unit, scored by the pack's own verifier: what a validator and the trainer each
do to a pack unit's file before its advantages (`scoring.score_rows(env_rewards=...)`).

Each row's task is the pack row its prompt index names (a pack unit's task source is the pack's rows), its
completion is decoded from the tokens, and the verifier runs in the sandbox (`tasks/packs/in_run.py`); a
completion it fails on scores 0 and is counted against the pack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.configs.tasks import TasksConfig
from swarmrl.rollouts.schema import RolloutRow
from swarmrl.tasks.completion import completion_text
from swarmrl.tasks.packs.in_run import JudgedFile, judge_file
from swarmrl.tasks.packs.pack import TaskPack

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def judge_pack_rows(
    pack: TaskPack, rows: list[RolloutRow], tokenizer: PreTrainedTokenizerBase, tasks: TasksConfig
) -> JudgedFile:
    texts = [completion_text(tokenizer, row.completion_ids) for row in rows]
    return judge_file(pack, [row.prompt_index for row in rows], texts, tasks)
