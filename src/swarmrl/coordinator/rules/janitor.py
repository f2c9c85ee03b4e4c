"""Uploads nobody submitted, and the bytes a run holds.

A slot's file that was never submitted is an orphan once the slot expires: its bytes are deleted (keys are free,
so without this any node could fill the disk). The quota counts the bytes a run holds: files that arrived
(submitted or waiting for their submit). A slot opened for a file reserves nothing: a size declared and never
sent costs no other node any room.
"""

from __future__ import annotations

import logging

from sqlalchemy import func, select

from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.store.db import UploadSlot
from swarmrl.coordinator.store.storage import StorageError

log = logging.getLogger(__name__)

PURGE_EVERY_S = 30.0
PURGE_BATCH = 500


def held_bytes(session, run_id: str) -> int:
    """Bytes of the run's files that arrived and are not purged (a presigned upload counts once its submit
    confirmed it landed)."""
    total = session.scalar(
        select(func.coalesce(func.sum(UploadSlot.size_bytes), 0)).where(
            UploadSlot.run_id == run_id, UploadSlot.purged_at.is_(None), UploadSlot.uploaded.is_(True)
        )
    )
    return int(total or 0)


def purge_orphans(state: ServiceState, now: float) -> int:
    """Delete the bytes of expired, never-submitted slots; returns how many slots were purged."""
    purged = 0
    with state.sessions() as session, session.begin():
        orphans = session.scalars(
            select(UploadSlot)
            .where(
                UploadSlot.submitted.is_(False),
                UploadSlot.purged_at.is_(None),
                UploadSlot.storage_key.is_not(None),
                UploadSlot.expires_at < now,
            )
            .limit(PURGE_BATCH)
        )
        for slot in orphans:
            assert slot.storage_key is not None  # the query's filter
            try:
                state.storage.delete(slot.storage_key)
            except (OSError, StorageError) as exc:
                log.warning("could not delete orphan upload %s: %s", slot.storage_key, exc)
                continue
            slot.purged_at = now
            purged += 1
            state.metrics.orphans_purged.inc()
            state.metrics.orphan_bytes_purged.inc(slot.size_bytes)
    return purged


def maybe_purge(state: ServiceState, now: float) -> None:
    """At most once every PURGE_EVERY_S, by whichever request comes first."""
    if now - state.orphans_purged_at < PURGE_EVERY_S or not state.purge_lock.acquire(blocking=False):
        return
    try:
        state.orphans_purged_at = now
        purge_orphans(state, now)
    finally:
        state.purge_lock.release()
