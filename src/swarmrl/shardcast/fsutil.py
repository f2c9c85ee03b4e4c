"""Filesystem helpers: atomic writes (temp name in the same directory, then rename) and safe paths."""

from __future__ import annotations

import os
import secrets
from pathlib import Path, PurePosixPath


def unique_temp_name(target: Path) -> Path:
    """A sibling of `target` no other process or thread will pick (pid + random token)."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def atomic_write_bytes(target: Path, data: bytes, fsync: bool = False) -> None:
    """Readers see either the old file or the whole new one, never a torn write."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = unique_temp_name(target)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def preallocate(path: Path, size: int) -> None:
    """Create `path` at its final size so shards can be written at their offsets in any order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
        if size > 0 and hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError:
                pass  # some filesystems (tmpfs variants, overlay) refuse; a sparse file still works
    finally:
        os.close(fd)


def zero_region(fd: int, offset: int, length: int, block: int = 1 << 20) -> None:
    """Overwrite `length` bytes at `offset` with zeros (bytes that failed their check must not stay)."""
    zeros = bytes(min(block, length))
    done = 0
    while done < length:
        done += os.pwrite(fd, zeros[: min(block, length - done)], offset + done)


def copy_region(src_fd: int, dst_fd: int, length: int, dst_offset: int, block: int = 8 << 20) -> None:
    """Copy bytes [0, length) of `src_fd` to `dst_offset` of `dst_fd` (in the kernel where it can)."""
    done = 0
    while done < length:
        try:
            moved = os.copy_file_range(src_fd, dst_fd, min(block, length - done), done, dst_offset + done)
        except (AttributeError, OSError):  # no copy_file_range (non-Linux, some filesystems): copy by hand
            chunk = os.pread(src_fd, min(block, length - done), done)
            moved = os.pwrite(dst_fd, chunk, dst_offset + done) if chunk else 0
        if moved <= 0:
            raise OSError(f"copy stopped after {done} of {length} bytes")
        done += moved


def is_safe_relative_path(path: str) -> bool:
    """True for a plain relative POSIX path that stays inside its root (no '..', no absolute, no NUL)."""
    if not path or "\x00" in path or "\\" in path or path.startswith("/"):
        return False
    # Split by hand: PurePosixPath would normalise "a//b" and "./a", letting two strings name one file.
    return all(part not in ("", ".", "..") for part in path.split("/")) and len(path) <= 1024


def resolve_inside(root: Path, relative: str) -> Path:
    """`root / relative`, refusing anything that would escape `root`."""
    if not is_safe_relative_path(relative):
        raise ValueError(f"unsafe relative path {relative!r}")
    return root.joinpath(*PurePosixPath(relative).parts)
