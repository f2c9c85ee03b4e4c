"""Deleting the bytes of files nobody needs: uploads nobody submitted, and files judged worthless.

A slot's file that was never submitted is an orphan once the slot expires; a submitted file rejected or voided
(its node hard-invalidated or banned) is released at its verdict (`storage_room`). A pass deletes the bytes of
both (keys are free, so without this any node could fill the disk); the quota counts the bytes a run holds:
files that arrived (submitted or waiting for their submit) and are neither. A slot opened for a file reserves
nothing: a size declared and never sent costs no other node any room.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter
from sqlalchemy import select

from swarmrl.coordinator.rules.storage_room import releasable
from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.store.db import UploadSlot
from swarmrl.coordinator.store.storage import StorageError

log = logging.getLogger(__name__)

PURGE_EVERY_S = 30.0
PURGE_BATCH = 500
PURGE_BATCHES = 20  # a pass deletes at most this many batches: bounded work for the request that runs it


def purge_orphans(state: ServiceState, now: float) -> int:
    """Delete the bytes of expired, never-submitted slots; returns how many slots were purged."""
    orphans = (
        UploadSlot.submitted.is_(False),
        UploadSlot.purged_at.is_(None),
        UploadSlot.storage_key.is_not(None),
        UploadSlot.expires_at < now,
    )
    return _purge(state, now, orphans, state.metrics.orphans_purged, state.metrics.orphan_bytes_purged)


def purge_released(state: ServiceState, now: float, node_id: str | None = None) -> int:
    """Delete the bytes of rejected and voided files (of `node_id` alone when given); returns how many."""
    metrics = state.metrics
    return _purge(state, now, (releasable(node_id),), metrics.released_purged, metrics.released_bytes_purged)


def release_node(state: ServiceState, node_id: str, now: float) -> None:
    """Right after a verdict rejected a node's file or a ban voided its work: delete the bytes it released, so
    a stream of junk holds no disk between the janitor's passes (one node's slots: an indexed, small query)."""
    with state.purge_lock:
        purge_released(state, now, node_id)


def _purge(state: ServiceState, now: float, where: tuple, files: Counter, size: Counter) -> int:
    """Delete the bytes of the slots `where` selects, a batch per transaction, at most PURGE_BATCHES batches."""
    purged = 0
    for _ in range(PURGE_BATCHES):
        with state.sessions() as session, session.begin():
            batch = list(session.scalars(select(UploadSlot).where(*where).limit(PURGE_BATCH)))
            for slot in batch:
                assert slot.storage_key is not None  # the query's filter
                try:
                    state.storage.delete(slot.storage_key)
                except (OSError, StorageError) as exc:
                    log.warning("could not delete upload %s: %s", slot.storage_key, exc)
                    continue
                slot.purged_at = now
                purged += 1
                files.inc()
                size.inc(slot.size_bytes)
        if len(batch) < PURGE_BATCH:
            break
    return purged


def maybe_purge(state: ServiceState, now: float) -> None:
    """At most once every PURGE_EVERY_S, by whichever request comes first."""
    if now - state.orphans_purged_at < PURGE_EVERY_S or not state.purge_lock.acquire(blocking=False):
        return
    try:
        state.orphans_purged_at = now
        purge_orphans(state, now)
        purge_released(state, now)
    finally:
        state.purge_lock.release()
