"""A node's background download of each checkpoint version as soon as a relay announces it."""

from __future__ import annotations

import logging
import threading
import time

from swarmrl.shardcast.client import CheckpointFetcher, local_versions
from swarmrl.shardcast.errors import ShardcastError
from swarmrl.shardcast.manifest import Manifest
from swarmrl.shardcast.transfer import TransferStats

log = logging.getLogger(__name__)


def transfer_summary(stats: TransferStats) -> str:
    """Where a fetch's bytes came from, for a log line: `2.7 MB from http://relay:8900, a delta`."""
    moved = [f"{n / 1e6:.1f} MB from {url}" for url, n in sorted(stats.bytes_by_source.items())]
    return ", ".join(moved or ["nothing fetched"]) + (", a delta" if stats.used_delta else "")


def next_in_line(held: int, newest: int, whole_bytes: int, delta_bytes: int | None) -> int:
    """The version to install next for a node holding `held` (-1: none) when `newest` is announced (whole
    `whole_bytes`, a delta from the version before it `delta_bytes`; None: no delta): the one right after
    `held` when the deltas from there to `newest` cost at most one delta more than `newest` whole, else
    `newest`.

    A node whose link carries a delta in less time than the trainer takes for a step, but not a whole
    checkpoint (on a narrow link the delta is the difference), falls behind for good by jumping to the newest
    version whole: by the time it holds it the next one is out, and jumping again costs a whole one again.
    Following the deltas, it gains on the trainer with each one, and holds a newer policy one delta after it
    started."""
    behind = newest - held
    if held < 0 or delta_bytes is None or behind < 2:
        return newest
    return held + 1 if (behind - 1) * delta_bytes <= whole_bytes else newest


def delta_bytes(manifest: Manifest) -> int | None:
    """The bytes of the manifest's delta payloads (None: the version has no delta)."""
    return None if manifest.delta is None else sum(entry.payload_size for entry in manifest.delta.entries)


class Prefetch(threading.Thread):
    """Installs each checkpoint version as soon as a relay announces it (long polls of `poll_s`), so a node
    holds the newest policy before its next unit (a worker) or submission (a validator) asks for it; errors are
    logged and retried after a pause."""

    def __init__(self, fetcher: CheckpointFetcher, stop: threading.Event, poll_s: float = 10.0) -> None:
        super().__init__(name="prefetch", daemon=True)
        self.fetcher, self.stop, self.poll_s = fetcher, stop, poll_s
        self.fetching: int | None = None  # the version being downloaded now

    def run(self) -> None:
        while not self.stop.is_set():
            held = local_versions(self.fetcher.dest_root)
            newest_held = held[-1] if held else -1
            try:
                found = self.fetcher.next_verified(newest_held, self.poll_s)
                if found is not None:
                    manifest = found[0]
                    announced = time.monotonic()
                    target = next_in_line(
                        newest_held, manifest.version, manifest.total_size, delta_bytes(manifest)
                    )
                    if target == manifest.version or not self._install_on_the_way(target, manifest.version):
                        self.fetching = manifest.version
                        self.fetcher.install(*found)
                        target = manifest.version
                    # The node's share of a broadcast: a slow one shows here, a late announcement does not.
                    took, moved = time.monotonic() - announced, transfer_summary(self.fetcher.last_stats)
                    log.info(
                        "policy step %d installed %.2fs after %s announcement (%s)",
                        target,
                        took,
                        "its" if target == manifest.version else f"step {manifest.version}'s",
                        moved,
                    )
            except ShardcastError as exc:
                log.warning("prefetching a new policy failed: %s", exc)
                self.stop.wait(1.0)
            except RuntimeError:
                if not self.stop.is_set():
                    raise
                return  # the node has stopped and the interpreter is shutting its executors down
            finally:
                self.fetching = None

    def _install_on_the_way(self, version: int, newest: int) -> bool:
        """Install `version`, on the way to `newest` (from its delta); False when no source still backs it."""
        self.fetching = version
        try:
            self.fetcher.fetch(version)
        except ShardcastError as exc:
            log.info(
                "policy step %d is gone on the way to step %d (%s): taking step %d",
                version,
                newest,
                exc,
                newest,
            )
            return False
        return True
