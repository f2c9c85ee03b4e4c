"""A node's background download of each checkpoint version as soon as a relay announces it."""

from __future__ import annotations

import logging
import threading
import time

from swarmrl.shardcast.client import CheckpointFetcher, local_versions
from swarmrl.shardcast.errors import ShardcastError
from swarmrl.shardcast.transfer import TransferStats

log = logging.getLogger(__name__)


def transfer_summary(stats: TransferStats) -> str:
    """Where a fetch's bytes came from, for a log line: `2.7 MB from http://relay:8900, a delta`."""
    moved = [f"{n / 1e6:.1f} MB from {url}" for url, n in sorted(stats.bytes_by_source.items())]
    return ", ".join(moved or ["nothing fetched"]) + (", a delta" if stats.used_delta else "")


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
            try:
                found = self.fetcher.next_verified(held[-1] if held else -1, self.poll_s)
                if found is not None:
                    version = self.fetching = found[0].version
                    announced = time.monotonic()
                    self.fetcher.install(*found)
                    # The node's share of a broadcast: a slow one shows here, a late announcement does not.
                    took, moved = time.monotonic() - announced, transfer_summary(self.fetcher.last_stats)
                    log.info(
                        "policy step %d installed %.2fs after its announcement (%s)", version, took, moved
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
