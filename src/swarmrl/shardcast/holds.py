"""Versions a node is loading or using, which pruning the local checkpoint store must never delete.

A worker lists its installed versions, picks one and reads its weights while the prefetch thread installs newer
ones and prunes the old; without a hold, a slow load (or a fast-stepping run) sees its version deleted
mid-read. The prune decides and takes a version out of the store's namespace (a rename) under the same lock a
hold is taken with, so after `hold` returns a version still listed stays whole until it is released.
"""

from __future__ import annotations

import secrets
import shutil
import threading
from collections import Counter
from pathlib import Path

from swarmrl.steps import step_dir_name

PRUNED_PREFIX = ".pruned-"  # not a `step_k` name: `local_versions` no longer lists it while it is deleted


class VersionHolds:
    """Counts of holds per version, shared by the threads of one node (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Counter[int] = Counter()

    def hold(self, version: int) -> None:
        with self._lock:
            self._held[version] += 1

    def release(self, version: int) -> None:
        with self._lock:
            self._held[version] -= 1
            if self._held[version] <= 0:
                del self._held[version]

    def held(self) -> set[int]:
        with self._lock:
            return set(self._held)

    def prune(self, dest_root: Path, versions: list[int]) -> list[int]:
        """Delete the installed `versions` not held now; returns those deleted."""
        doomed: dict[int, Path] = {}
        with self._lock:
            for version in versions:
                if version in self._held:
                    continue
                target = dest_root / f"{PRUNED_PREFIX}{version}-{secrets.token_hex(4)}"
                try:
                    (dest_root / step_dir_name(version)).rename(target)
                except FileNotFoundError:
                    continue
                doomed[version] = target
        for target in doomed.values():
            shutil.rmtree(target, ignore_errors=True)
        return sorted(doomed)
