"""A pack's files, read into memory from a directory or a .tar.gz archive, never extracted onto the disk.

A pack is a flat set of files with fixed names (`PACK_FILES`); nothing else may travel with it, so nothing
unsigned or unchecked does. An archive holds them at its root or under one top-level folder. Refused, each with
a one-line `PackError` naming the member: absolute or `..` paths, links, devices and other non-regular members,
nested folders, unknown or repeated names, more members than a pack has files, and sizes over the caps — the
compressed archive, every member and all of them unpacked together, counted as the gzip stream is inflated (a
decompression bomb stops at the cap, not at the end of the stream).
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from swarmrl.configs.task_packs import PackLimitsConfig
from swarmrl.tasks.packs.errors import PackError

MANIFEST = "manifest.toml"
PROMPTS = "prompts.jsonl"
VERIFIER = "verifier.py"
REFERENCES = "references.jsonl"
SIGNATURE = "signature.json"
PACK_FILES = frozenset({MANIFEST, PROMPTS, VERIFIER, REFERENCES, SIGNATURE, "README.md", "LICENSE"})
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
# tar headers and padding around the members: 512-byte blocks, the end marker, a pax header or two.
_TAR_OVERHEAD = 64 << 10


@dataclass(frozen=True)
class PackFiles:
    """The files of a pack by name, and where they came from (for messages)."""

    origin: str
    files: dict[str, bytes]

    def get(self, name: str) -> bytes | None:
        return self.files.get(name)

    def require(self, name: str) -> bytes:
        data = self.files.get(name)
        if data is None:
            raise PackError(f"{self.origin}: the pack has no {name}")
        return data

    def text(self, name: str) -> str:
        try:
            return self.require(name).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PackError(f"{self.origin}/{name}: not UTF-8 text (byte {exc.start})") from None


def read_pack_files(path: str | Path, limits: PackLimitsConfig) -> PackFiles:
    """The files of the pack at `path`: a directory, or a .tar.gz / .tgz archive."""
    path = Path(path)
    if path.is_dir():
        return PackFiles(str(path), _read_directory(path, limits))
    if path.name.endswith(ARCHIVE_SUFFIXES):
        return _read_archive(path, limits)
    if not path.exists():
        raise PackError(f"{path}: no such pack (a directory or a .tar.gz archive)")
    raise PackError(f"{path}: a pack is a directory or a .tar.gz / .tgz archive")


def _read_directory(path: Path, limits: PackLimitsConfig) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    total = 0
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        where = f"{path}/{entry.name}"
        if entry.is_symlink():
            raise PackError(f"{where}: a link; a pack holds regular files only")
        if entry.is_dir():
            raise PackError(f"{where}: a folder; a pack's files all sit at its top level")
        _check_name(entry.name, where)
        if not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
            raise PackError(f"{where}: not a regular file")
        data = _read_capped(entry.path, limits.max_unpacked_bytes - total, where, limits)
        total += len(data)
        files[entry.name] = data
    return files


def _read_capped(file_path: str, room: int, where: str, limits: PackLimitsConfig) -> bytes:
    fd = os.open(file_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(room + 1)
    if len(data) > room:
        raise PackError(f"{where}: the pack's files are over {limits.max_unpacked_bytes} bytes together")
    return data


class _CappedReader(io.RawIOBase):
    """The inflated stream, refusing to yield more than `cap` bytes in all."""

    def __init__(self, stream: gzip.GzipFile, cap: int, where: str) -> None:
        self._stream, self._left, self._where = stream, cap, where

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = self._left + 1 if size is None or size < 0 else min(size, self._left + 1)
        data = self._stream.read(want)
        self._left -= len(data)
        if self._left < 0:
            raise PackError(f"{self._where}: inflates past the cap on a pack's unpacked size")
        return data


def _read_archive(path: Path, limits: PackLimitsConfig) -> PackFiles:
    size = path.stat().st_size
    if size > limits.max_archive_bytes:
        raise PackError(
            f"{path}: {size} bytes, over the cap of {limits.max_archive_bytes} for a pack archive"
        )
    with path.open("rb") as handle:
        return archive_files(handle.read(limits.max_archive_bytes + 1), str(path), limits)


def archive_files(raw: bytes, origin: str, limits: PackLimitsConfig) -> PackFiles:
    """The files of a .tar.gz pack held in memory (as a coordinator or validator receives one)."""
    if len(raw) > limits.max_archive_bytes:
        raise PackError(f"{origin}: over the cap of {limits.max_archive_bytes} bytes for a pack archive")
    reader = _CappedReader(
        gzip.GzipFile(fileobj=io.BytesIO(raw)), limits.max_unpacked_bytes + _TAR_OVERHEAD, origin
    )
    try:
        with tarfile.open(fileobj=reader, mode="r|") as archive:
            return PackFiles(origin, _members(archive, origin, limits))
    except (tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError, OSError, UnicodeError) as exc:
        raise PackError(f"{origin}: not a readable .tar.gz archive ({type(exc).__name__}: {exc})") from None


def _members(archive: tarfile.TarFile, where: str, limits: PackLimitsConfig) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    top: str | None = None
    total = 0
    for count, member in enumerate(archive, start=1):
        if count > len(PACK_FILES) + 1:
            raise PackError(f"{where}: more members than a pack has files")
        name, top = _member_name(member, top, where)
        if name is None:
            continue
        member_where = f"{where}: member {member.name!r}"
        if name in files:
            raise PackError(f"{member_where}: {name} appears twice")
        if member.size > limits.max_unpacked_bytes - total:
            raise PackError(
                f"{member_where}: the pack's files are over {limits.max_unpacked_bytes} bytes together"
            )
        handle = archive.extractfile(member)
        data = handle.read(member.size) if handle is not None else b""
        if len(data) != member.size:
            raise PackError(f"{member_where}: truncated")
        total += len(data)
        files[name] = data
    return files


def _member_name(member: tarfile.TarInfo, top: str | None, where: str) -> tuple[str | None, str | None]:
    """(pack file name or None for the top folder itself, the archive's top folder)."""
    member_where = f"{where}: member {member.name!r}"
    path = PurePosixPath(member.name)
    if member.name.startswith("/") or "\\" in member.name or any(part == ".." for part in path.parts):
        raise PackError(f"{member_where}: a path outside the pack")
    parts = [part for part in path.parts if part != "."]
    if member.isdir():
        if len(parts) != 1 or (top is not None and parts[0] != top):
            raise PackError(f"{member_where}: a nested folder; a pack's files sit at one level")
        return None, parts[0]
    if not member.isreg():
        raise PackError(f"{member_where}: not a regular file (links and devices are refused)")
    if len(parts) == 2:
        if top is not None and parts[0] != top:
            raise PackError(f"{member_where}: a second top-level folder")
        top = parts[0]
    elif len(parts) != 1:
        raise PackError(f"{member_where}: a nested folder; a pack's files sit at one level")
    _check_name(parts[-1], member_where)
    return parts[-1], top


def _check_name(name: str, where: str) -> None:
    if name not in PACK_FILES:
        raise PackError(f"{where}: not a pack file (a pack holds {', '.join(sorted(PACK_FILES))})")


def write_archive(files: PackFiles, folder: str, out: Path) -> None:
    """A reproducible .tar.gz of the pack at `out` (`archive_bytes`)."""
    out.write_bytes(archive_bytes(files, folder))


def archive_bytes(files: PackFiles, folder: str) -> bytes:
    """A reproducible .tar.gz of the pack: its files under `folder`, sorted, with no times, owners or modes
    of this machine."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed:
        with tarfile.open(fileobj=compressed, mode="w", format=tarfile.USTAR_FORMAT) as archive:
            for name in sorted(files.files):
                info = tarfile.TarInfo(f"{folder}/{name}")
                info.size, info.mode, info.mtime = len(files.files[name]), 0o644, 0
                archive.addfile(info, io.BytesIO(files.files[name]))
    return buffer.getvalue()
