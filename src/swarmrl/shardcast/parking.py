"""Range requests parked at an upstream for a version not published yet, so its bytes leave the moment it is.

A relay far from its upstream learns of a new version one one-way delay after its publication and then needs
a round trip before the first byte of its delta arrives. The delta of the version after the one just mirrored
is predictable: the same files coded against this version (`delta_payload_path`), cut into shards at the same
offsets. So the relay sends those range requests at once with `?wait=` — the upstream holds each until the
version exists, then answers it like any other — and its download of that version takes the answers over when
the signed manifest names those very shards. A prediction that does not hold (a file gone, a payload shorter,
a full publication with no delta) is refused by the upstream or never taken and dropped; nothing parked is
believed: a taken answer's bytes are checked against the manifest's digest like every other shard's.
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from urllib.parse import quote

from swarmrl.configs.shardcast import ClientConfig
from swarmrl.shardcast.layout import delta_payload_path
from swarmrl.shardcast.manifest import Manifest, ShardEntry
from swarmrl.shardcast.range_get import RangeAnswer, request_range
from swarmrl.shardcast.range_pool import Cut, RangePool

# How long a download waits for a parked request that has not been answered when it wants the shard (the
# announcement and the answer left the upstream together; a longer wait means the prediction was wrong).
TAKE_WAIT_S = 1.0

Key = tuple[str, int, str, int, int]  # (upstream, version, path, offset, length)


class ParkedRanges:
    """The parked range requests of one relay (at most `limit` at once), keyed by what they ask for."""

    def __init__(self, config: ClientConfig, wait_s: float, limit: int) -> None:
        self.wait_s, self.limit = wait_s, limit
        self._pool = RangePool(config.connect_timeout_s, wait_s + config.request_timeout_s, keep_alive=limit)
        self._threads = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="shardcast-park")
        self._parked: dict[Key, Future[RangeAnswer]] = {}
        self._waiting: dict[Future[RangeAnswer], Cut] = {}  # requests not answered yet: cut at close
        self._lock = threading.RLock()
        self._closed = False
        self.taken = 0  # answers a download took over (for logs and tests)

    def park_next(self, upstream: str, manifest: Manifest) -> int:
        """Park, at `upstream`, the requests for the delta shards of the version after `manifest`'s, predicted
        from its own delta: full-size shards only (a file's last shard may change length). Returns how many."""
        if manifest.delta is None:
            return 0
        version = manifest.version + 1
        files = {entry.payload_path: entry.path for entry in manifest.delta.entries}
        parked = 0
        with self._lock:
            for shard in manifest.delta.shards:
                if self._closed or len(self._parked) >= self.limit:
                    break
                if shard.length != manifest.shard_size or shard.path not in files:
                    continue
                path = delta_payload_path(manifest.version, files[shard.path])
                key = (upstream, version, path, shard.offset, shard.length)
                if key in self._parked:
                    continue
                url = f"{upstream}/v/{version}/data/{quote(path)}?wait={self.wait_s:g}"
                request = Cut()
                future = self._threads.submit(
                    request_range, self._pool, url, shard.offset, shard.length, request
                )
                self._parked[key] = future
                self._waiting[future] = request
                # Runs at once, under this lock, when the request already failed: hence the RLock.
                future.add_done_callback(functools.partial(self._answered, key))
                parked += 1
        return parked

    def has(self, upstream: str, version: int, shard: ShardEntry) -> bool:
        with self._lock:
            return self._key(upstream, version, shard) in self._parked

    def take(self, upstream: str, version: int, shard: ShardEntry) -> RangeAnswer | None:
        """The answer to the parked request for exactly this shard, if there is one and it was answered well
        (waits up to TAKE_WAIT_S for it); None: ask afresh. Runs on a fetch thread."""
        with self._lock:
            future = self._parked.pop(self._key(upstream, version, shard), None)
        if future is None:
            return None
        try:
            answer = future.result(timeout=TAKE_WAIT_S)
        except FutureTimeout:
            future.add_done_callback(_close_answer)  # taken by nobody now: its bytes are not wanted
            return None
        except Exception:  # refused or failed: a fresh request will say why, with its usual accounting
            return None
        with self._lock:
            self.taken += 1
        return answer

    def drop(self, through_version: int) -> None:
        """Give up the requests parked for versions up to `through_version` that nobody took."""
        with self._lock:
            stale = [key for key in self._parked if key[1] <= through_version]
            futures = [self._parked.pop(key) for key in stale]
        for future in futures:
            future.add_done_callback(_close_answer)

    def close(self) -> None:
        """Unblock every request still waiting at an upstream and stop."""
        with self._lock:
            self._closed = True
            futures = list(self._parked.values())
            self._parked.clear()
            waiting = list(self._waiting.values())
        for future in futures:
            future.add_done_callback(_close_answer)
        for request in waiting:  # their threads, blocked until the upstream answers, return at once
            request()
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._pool.close()

    def _answered(self, key: Key, future: Future[RangeAnswer]) -> None:
        """A request refused (an upstream's parking timed out, or the prediction did not hold) leaves the
        table at once, so the next version can be parked there."""
        with self._lock:
            self._waiting.pop(future, None)
        if future.cancelled() or future.exception() is not None:
            with self._lock:
                if self._parked.get(key) is future:
                    del self._parked[key]

    @staticmethod
    def _key(upstream: str, version: int, shard: ShardEntry) -> Key:
        return (upstream, version, shard.path, shard.offset, shard.length)


def _close_answer(future: Future[RangeAnswer]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()
