"""Whole-file digests computed while the shards are still arriving.

Shards land out of order, but a file digest must be fed front to back. Each file keeps a cursor; whenever the
shard at the cursor is on disk (already checked against its own signed digest), a single background thread
reads it back from the page cache and feeds the file hasher. By the time the last shard lands, the file digest
is nearly done, so checking it costs little extra wall time.
"""

from __future__ import annotations

import asyncio
import mmap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from swarmrl.configs.shardcast import HashAlgorithm
from swarmrl.shardcast.fsutil import resolve_inside
from swarmrl.shardcast.hashing import new_hasher
from swarmrl.shardcast.manifest import FileEntry, ShardEntry


class _FileCursor:
    def __init__(self, path: Path, entry: FileEntry, algorithm: HashAlgorithm) -> None:
        self.path = path
        self.entry = entry
        self.hasher = new_hasher(algorithm)
        self.cursor = 0
        self.ready: dict[int, int] = {}  # offset -> end of a verified shard not yet hashed
        self.lock = threading.Lock()

    def advance(self) -> None:
        """Runs on the verifier thread: hash every verified byte contiguous with the cursor.

        Reads through a read-only mmap: hashing straight from the page cache saves a copy per byte.
        """
        with self.lock:
            end = self.ready.pop(self.cursor, None)
        if end is None:
            return
        with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                if len(view) < self.entry.size:
                    raise OSError(f"{self.path} is shorter than its manifest entry")
                while end is not None:
                    self.hasher.update(view[self.cursor : end])
                    self.cursor = end
                    with self.lock:
                        end = self.ready.pop(self.cursor, None)
            finally:
                view.release()


class StreamingVerifier:
    """Whole-file digests of a version's files, fed as shards verify (`shard_done`), read by `finish`."""

    def __init__(self, root: Path, files: list[FileEntry], algorithm: HashAlgorithm) -> None:
        self._files = {f.path: _FileCursor(resolve_inside(root, f.path), f, algorithm) for f in files}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shardcast-verify")

    def shard_done(self, shard: ShardEntry) -> None:
        cursor = self._files[shard.path]
        with cursor.lock:
            cursor.ready[shard.offset] = shard.offset + shard.length
        self._executor.submit(cursor.advance)

    async def finish(self) -> dict[str, str]:
        """{path: digest} once every byte is hashed; a file with gaps gets the digest of its prefix."""
        loop = asyncio.get_running_loop()
        try:
            for cursor in self._files.values():
                await asyncio.wrap_future(self._executor.submit(cursor.advance), loop=loop)
            return {path: cursor.hasher.hexdigest() for path, cursor in self._files.items()}
        finally:
            self._executor.shutdown(wait=False)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
