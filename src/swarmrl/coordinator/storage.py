"""Where uploaded rollout files live: one small interface, a local-directory implementation.

An S3-compatible store would implement the same three methods (presigned URLs for `put`/`get`).
"""

from __future__ import annotations

import os
import re
import shutil
from abc import ABC, abstractmethod
from pathlib import Path

_KEY_PART = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class StorageError(Exception):
    """A storage key is malformed or names no object."""


def validate_key(key: str) -> list[str]:
    parts = key.split("/")
    for part in parts:
        if not _KEY_PART.match(part) or part in (".", ".."):
            raise StorageError(f"invalid storage key part {part!r} in {key!r}")
    return parts


class Storage(ABC):
    @abstractmethod
    def put(self, key: str, source: Path) -> None:
        """Store the file at `source` under `key` (moving it when it can), atomically."""

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def path(self, key: str) -> Path:
        """A local path to the object's bytes (a cached copy for remote stores)."""


class LocalStorage(Storage):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.staging = self.root / ".staging"
        self.staging.mkdir(exist_ok=True)

    def _resolve(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key))

    def put(self, key: str, source: Path) -> None:
        target = self._resolve(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.move(str(source), tmp)
        os.replace(tmp, target)

    def get(self, key: str) -> bytes:
        return self.path(key).read_bytes()

    def path(self, key: str) -> Path:
        target = self._resolve(key)
        if not target.is_file():
            raise StorageError(f"no object {key!r}")
        return target
