"""How many bytes a run's uploads may hold, and whose files fill which room.

Identities are free, so room is held for them in proportion to nothing they can mint:

- A file is no larger than the run's unit can make it: the cap is derived from the contract the run was created
  with (rows per unit × the most a row of `max_new_tokens` completion tokens and a prompt the validators still
  take can weigh in parquet), `upload_max_bytes` only an outer cap.
- A file judged worthless holds nothing: the bytes of a rejected or voided file (its node hard-invalidated or
  banned) leave the count at the verdict and are deleted right after it (`janitor.release_node`); a file
  rejected elsewhere (the trainer's audit) at the janitor's next pass.
- Files of unproven nodes (fewer than `lease_proven_files` of their files accepted by a validator) share
  `storage_unproven_fraction` of the quota, however many keys they are; proven nodes' files use the rest. No
  number of fresh keys can take the room an honest proven node's upload needs, and a key proven with one honest
  file holds no more than its live leases let it upload, its junk released at its rejection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy import and_, case, exists, func, select
from sqlalchemy.orm import Session

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.errors import ApiError
from swarmrl.coordinator.rules.leases import proven_nodes
from swarmrl.coordinator.store.db import Run, Submission, UploadSlot
from swarmrl.rollouts.io import RolloutLimits
from swarmrl.rollouts.schema import PROOF_BYTES, PROOF_CHUNK_TOKENS

RELEASED_STATES = ("rejected", "voided")  # a file in these holds no room: its bytes are released

# The longest prompt a validator takes in a row (the contract does not bound prompts; validators refuse longer).
PROMPT_TOKENS = RolloutLimits.model_fields["max_prompt_tokens"].default
# Per row beyond its lists: seven fixed-width columns (44 bytes) and the strings (task id, finish reason).
ROW_FIXED_BYTES = 44 + 256
# Parquet over the raw values: levels, page headers and statistics, measured at most ~1.3 × on incompressible rows.
ENCODING_MARGIN = 1.5
FILE_OVERHEAD_BYTES = 64 * 1024  # footer, schema, the signed header


def row_cap_bytes(max_new_tokens: int, prompt_tokens: int = PROMPT_TOKENS) -> int:
    """The most one row may weigh raw: prompt ids, completion ids, logprobs, mask, proofs and its fixed columns."""
    proofs = math.ceil(max_new_tokens / PROOF_CHUNK_TOKENS) * PROOF_BYTES
    return 4 * prompt_tokens + (4 + 4 + 1) * max_new_tokens + proofs + ROW_FIXED_BYTES


def unit_file_cap(contract: ContractSection, prompt_tokens: int = PROMPT_TOKENS) -> int:
    """The largest file one unit of a run with this contract can honestly be (an upper bound, not an estimate)."""
    raw = contract.rows_per_batch * row_cap_bytes(contract.max_new_tokens, prompt_tokens)
    return FILE_OVERHEAD_BYTES + math.ceil(ENCODING_MARGIN * raw)


def upload_cap(run: Run, config: CoordinatorConfig) -> int:
    """The largest file a node may upload for `run`: its unit's cap, within `upload_max_bytes`."""
    if run.contract is None:
        return config.upload_max_bytes
    return min(config.upload_max_bytes, unit_file_cap(ContractSection.model_validate(run.contract)))


def check_size(run: Run, size: int, config: CoordinatorConfig) -> None:
    """Refuse (413 `too_large`) a file larger than the run's cap, naming the rule."""
    cap = upload_cap(run, config)
    if size <= cap:
        return
    rule = "upload_max_bytes" if cap == config.upload_max_bytes else "its contract's unit bounds"
    raise ApiError(
        f"{size} bytes is over run {run.run_id!r}'s file cap of {cap} bytes ({rule})",
        kind="too_large",
        status=413,
    )


def _released():
    """The slot's file was submitted and judged worthless (rejected, or voided with its node)."""
    return exists(
        select(Submission.id).where(
            Submission.run_id == UploadSlot.run_id,
            Submission.sha256 == UploadSlot.sha256,
            Submission.storage_key == UploadSlot.storage_key,
            Submission.status.in_(RELEASED_STATES),
        )
    )


def _held(run_id: str):
    """Slots of the run whose file arrived, is not deleted and is not released."""
    return and_(
        UploadSlot.run_id == run_id,
        UploadSlot.purged_at.is_(None),
        UploadSlot.uploaded.is_(True),
        ~_released(),
    )


@dataclass(frozen=True)
class HeldBytes:
    proven: int
    unproven: int

    @property
    def total(self) -> int:
        return self.proven + self.unproven


def held_bytes(session: Session, run_id: str, config: CoordinatorConfig) -> HeldBytes:
    """Bytes the run's files hold, by their node's standing (a presigned upload counts once its submit
    confirmed it landed)."""
    proven = UploadSlot.node_id.in_(proven_nodes(run_id, config))
    proven_bytes, unproven_bytes = session.execute(
        select(
            func.coalesce(func.sum(case((proven, UploadSlot.size_bytes), else_=0)), 0),
            func.coalesce(func.sum(case((proven, 0), else_=UploadSlot.size_bytes)), 0),
        ).where(_held(run_id))
    ).one()
    return HeldBytes(proven=int(proven_bytes), unproven=int(unproven_bytes))


def pools(config: CoordinatorConfig) -> tuple[int, int]:
    """(proven, unproven) room of a run: the unproven nodes' share of the quota, and the rest."""
    unproven = math.floor(config.storage_quota_bytes * config.storage_unproven_fraction)
    return config.storage_quota_bytes - unproven, unproven


def check_room(
    session: Session, run_id: str, node_proven: bool, size: int, config: CoordinatorConfig
) -> None:
    """Refuse (507 `storage_quota`) a file the room of its node's standing cannot hold, naming the pool."""
    held = held_bytes(session, run_id, config)
    proven_room, unproven_room = pools(config)
    room, used = (proven_room, held.proven) if node_proven else (unproven_room, held.unproven)
    if used + size <= room:
        return
    pool = "proven nodes' files" if node_proven else "unproven nodes' files (storage_unproven_fraction)"
    raise ApiError(
        f"run {run_id!r}: {pool} hold {used} bytes; {size} more would pass their room of {room} "
        f"(storage_quota_bytes {config.storage_quota_bytes})",
        kind="storage_quota",
        status=507,
    )


def releasable(node_id: str | None = None):
    """Uploaded slots whose file is released and whose bytes are still on disk (the janitor's to delete); of
    `node_id` alone when given."""
    where = [UploadSlot.purged_at.is_(None), UploadSlot.storage_key.is_not(None), _released()]
    if node_id is not None:
        where.append(UploadSlot.node_id == node_id)
    return and_(*where)
