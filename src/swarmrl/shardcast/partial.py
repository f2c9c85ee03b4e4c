"""A client's in-progress download: a per-process directory, its lock, and the resumable progress file.

Two live clients never share a partial directory (each holds an flock on its own). A directory whose lock is
free belongs to a dead process and is adopted by the next client fetching that version, which re-hashes the
shards the progress file claims (disk reads are cheap next to the network) and downloads only the rest.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from swarmrl.shardcast.fsutil import atomic_write_bytes

PARTIAL_DIR = ".partial"
LOCK_NAME = ".lock"
PROGRESS_NAME = ".progress.json"


@dataclass
class Progress:
    version: int
    manifest_sha256: str
    plan: str
    verified: set[int] = field(default_factory=set)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "version": self.version,
                "manifest_sha256": self.manifest_sha256,
                "plan": self.plan,
                "verified": sorted(self.verified),
            }
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Progress | None:
        """None for anything unreadable: a damaged progress file just means starting that version over."""
        try:
            data = json.loads(raw)
            verified = {int(i) for i in data["verified"]}
            return cls(int(data["version"]), str(data["manifest_sha256"]), str(data["plan"]), verified)
        except (ValueError, KeyError, TypeError):
            return None


class PartialDownload:
    """Owns one partial directory for the duration of a fetch (a context manager)."""

    def __init__(self, directory: Path, lock_fd: int, progress: Progress | None) -> None:
        self.directory = directory
        self._lock_fd = lock_fd
        self.previous = progress

    @classmethod
    def acquire(cls, dest_root: Path, version: int) -> PartialDownload:
        """Adopt the abandoned partial directory of `version` with the most progress, else create one.

        Other abandoned directories of the same version are deleted: their owners are dead.
        """
        parent = dest_root / PARTIAL_DIR
        parent.mkdir(parents=True, exist_ok=True)
        abandoned: list[tuple[Path, int, Progress | None]] = []
        for candidate in sorted(parent.glob(f"step_{version}.*")):
            lock_fd = _try_lock(candidate / LOCK_NAME)
            if lock_fd is None:
                continue
            try:
                progress = Progress.from_bytes((candidate / PROGRESS_NAME).read_bytes())
            except OSError:
                progress = None
            abandoned.append((candidate, lock_fd, progress))
        if abandoned:
            abandoned.sort(key=lambda item: len(item[2].verified) if item[2] else -1, reverse=True)
            (best, best_fd, best_progress), rest = abandoned[0], abandoned[1:]
            for directory, lock_fd, _ in rest:
                shutil.rmtree(directory, ignore_errors=True)
                os.close(lock_fd)
            return cls(best, best_fd, best_progress)
        directory = parent / f"step_{version}.{os.getpid()}.{secrets.token_hex(4)}"
        directory.mkdir()
        lock_fd = _try_lock(directory / LOCK_NAME)
        assert lock_fd is not None, "a directory this process just created is unlocked"
        return cls(directory, lock_fd, None)

    def save(self, progress: Progress) -> None:
        atomic_write_bytes(self.directory / PROGRESS_NAME, progress.to_bytes())

    def reset(self) -> None:
        """Drop everything downloaded so far (keeps the directory and the lock)."""
        for child in self.directory.iterdir():
            if child.name == LOCK_NAME:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def finish(self, final: Path) -> Path:
        """Rename into place (atomic); if another client got there first keep theirs. Releases the lock."""
        (self.directory / PROGRESS_NAME).unlink(missing_ok=True)
        (self.directory / LOCK_NAME).unlink(missing_ok=True)
        try:
            os.rename(self.directory, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(self.directory, ignore_errors=True)
        self.release()
        return final

    def release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _try_lock(path: Path) -> int | None:
    """An open fd holding an exclusive flock on `path`, or None if a live process holds it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd
