"""Crowds of members written straight into a test coordinator's database: the thousands of keys of adversarial
tests and benchmarks where the HTTP path is not what is under test (it is exercised for a realistic number
beside them). Node ids are any 64 hex digits the caller picks, as ground keys' are: nothing here signs.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence

from sqlalchemy import insert

from swarmrl.coordinator.server.state import ServiceState
from swarmrl.coordinator.store.db import Ban, Membership, Node, RelayState, Submission, UploadSlot


def ground_ids(count: int, prefix: str = "00") -> list[str]:
    """`count` node ids starting with `prefix`: what keys ground for a chosen prefix look like."""
    return [prefix + secrets.token_hex(32)[len(prefix) :] for _ in range(count)]


def add_members(
    state: ServiceState,
    run_id: str,
    node_ids: Sequence[str],
    *,
    now: float,
    role: str = "worker",
    last_seen: float | None = None,
) -> None:
    """Register and join each of `node_ids` (never proven: no file of theirs accepted)."""
    if not node_ids:
        return
    with state.sessions() as session, session.begin():
        session.execute(
            insert(Node),
            [{"node_id": n, "hardware": {}, "registered_at": now, "hard_rejects": 0} for n in node_ids],
        )
        session.execute(
            insert(Membership),
            [
                {
                    "run_id": run_id,
                    "node_id": n,
                    "status": "active",
                    "joined_at": now,
                    "last_seen": now if last_seen is None else last_seen,
                    "heartbeats": 1,
                    "role": role,
                    "judged_accepted": 0,
                }
                for n in node_ids
            ],
        )


def add_relay_reports(
    state: ServiceState, run_id: str, node_ids: Sequence[str], *, now: float, version: int
) -> None:
    """Each relay of `node_ids` claims to serve at its own URL and to hold `version` complete."""
    if not node_ids:
        return
    with state.sessions() as session, session.begin():
        session.execute(
            insert(RelayState),
            [
                {
                    "run_id": run_id,
                    "node_id": n,
                    "report": {
                        "url": f"http://relay-{n[:16]}.example:8900",
                        "upstreams": ["http://origin.example:8800"],
                        "versions": [{"version": version, "complete": True, "bytes": 1}],
                        "served_bytes": 0,
                    },
                    "reported_at": now,
                }
                for n in node_ids
            ],
        )


def add_files(
    state: ServiceState, run_id: str, node_ids: Sequence[str], *, size: int, status: str, now: float
) -> int:
    """One uploaded and submitted file of `size` bytes per node, in `status` (pending, rejected, voided), its
    bytes in the coordinator's storage; returns the bytes written."""
    if not node_ids:
        return 0
    slots, submissions = [], []
    staging = state.storage.staging_dir()
    for node_id in node_ids:
        data = secrets.token_bytes(size)
        sha = hashlib.sha256(data).hexdigest()
        slot_id = secrets.token_hex(16)
        key = f"runs/{run_id}/step_0/{node_id}/{sha}-{slot_id}.parquet"
        staged = staging / f"{slot_id}.part"
        staged.write_bytes(data)
        state.storage.put(key, staged)
        common = {"run_id": run_id, "node_id": node_id, "step": 0, "sha256": sha, "size_bytes": size}
        slots.append(
            {
                **common,
                "slot_id": slot_id,
                "created_at": now,
                "expires_at": now + 3600.0,
                "uploaded": True,
                "submitted": True,
                "storage_key": key,
            }
        )
        submissions.append(
            {**common, "rows": 1, "tokens": 1, "storage_key": key, "status": status, "submitted_at": now}
        )
    with state.sessions() as session, session.begin():
        session.execute(insert(UploadSlot), slots)
        session.execute(insert(Submission), submissions)
    return size * len(node_ids)


def ban(state: ServiceState, node_ids: Sequence[str], *, now: float, reason: str = "forged files") -> None:
    """Ban each of `node_ids` (as a hard rejection at the threshold does; their memberships ejected)."""
    if not node_ids:
        return
    with state.sessions() as session, session.begin():
        session.execute(insert(Ban), [{"node_id": n, "reason": reason, "banned_at": now} for n in node_ids])
        session.query(Membership).filter(Membership.node_id.in_(node_ids)).update(
            {"status": "ejected"}, synchronize_session=False
        )
