"""The failures a person running swarmrl can fix, as one family the command line recognises.

A missing model directory, a dataset without the columns a task needs, a port another process holds, a full
disk: raising a `UserError` (or a subclass, or an error family that derives from it) tells the CLI to print its
message as one line and exit with code 2, keeping the traceback for the log (see `swarmrl.cli.failures`). The
message must say what is wrong and where (the path, the field, host:port), since it is all the person sees.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class UserError(Exception):
    """A failure the person running swarmrl can fix; its message is the one line they see."""


class AddressInUse(UserError):
    """A server could not listen: another process already holds host:port."""

    def __init__(self, host: str, port: int, what: str = "server") -> None:
        super().__init__(
            f"{what} cannot listen on {host}:{port}: the address is already in use "
            "(another process listens there; stop it or choose another port)"
        )
        self.host, self.port = host, port


def listen_error(exc: OSError, host: str, port: int, what: str) -> OSError | AddressInUse:
    """What a failed bind or listen on host:port should raise: AddressInUse naming it, or the error itself."""
    return AddressInUse(host, port, what) if exc.errno == errno.EADDRINUSE else exc


class DiskFull(UserError):
    """Writing a file failed for lack of space (or quota) on its filesystem."""

    def __init__(self, path: object) -> None:
        super().__init__(
            f"no space left on the device holding {path}: free some space or choose another directory"
        )
        self.path = path


# Below this many free bytes a failed write is taken for a full disk, whatever the writer called it (torch's
# "file write failed", safetensors' wrapped "os error 28").
NEARLY_FULL_BYTES = 1 << 20


def is_disk_full(exc: BaseException, path: str | Path | None = None) -> bool:
    """Whether `exc`, raised while writing under `path`, came from a full disk (or quota)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if "No space left on device" in str(exc) or "os error 28" in str(exc):
        return True
    if path is None:
        return False
    existing = next((p for p in (Path(path), *Path(path).parents) if p.exists()), None)
    try:
        return existing is not None and shutil.disk_usage(existing).free < NEARLY_FULL_BYTES
    except OSError:
        return False


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Around a write of `path`: running out of space becomes `DiskFull` naming it, whatever raised it."""
    try:
        yield
    except Exception as exc:
        if is_disk_full(exc, path):
            raise DiskFull(path) from exc
        raise
