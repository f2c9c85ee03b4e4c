"""Which source to ask for a shard: weighted sampling on measured success × throughput.

A source's weight is its smoothed success rate (Beta(1,1) prior: (ok + 1) / (ok + failed + 2)) times its
throughput estimate (EWMA of bytes/s; an unmeasured source borrows the best measured one so it gets tried),
divided by 20 for every corrupt shard, forged manifest or false announcement it sent. A request cut for being
slower than the throughput floor is a failure whose observed rate also enters the estimate, so a trickling
source sinks to almost no weight at once. With probability `exploration` the pick is uniform, so a source
that was slow once can recover. A failed source sits out an exponential back-off.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

EWMA_ALPHA = 0.3
CORRUPTION_PENALTY = 20.0
DEFAULT_THROUGHPUT = 1e6
MIN_WEIGHT = 1e-9


@dataclass
class SourceStats:
    url: str
    successes: int = 0
    failures: int = 0
    corrupt: int = 0
    throughput: float | None = None
    consecutive_failures: int = 0
    backoff_until: float = 0.0

    def success_rate(self) -> float:
        return (self.successes + 1) / (self.successes + self.failures + 2)


class SourceSelector:
    def __init__(
        self,
        urls: list[str],
        exploration: float = 0.1,
        backoff_base_s: float = 0.25,
        backoff_max_s: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        self.stats = {url: SourceStats(url) for url in urls}
        self.exploration = exploration
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.rng = rng or random.Random()

    def add(self, url: str) -> None:
        self.stats.setdefault(url, SourceStats(url))

    def throughput(self, url: str) -> float:
        """Bytes/s expected from `url`: its estimate, or the best measured one while it is unmeasured."""
        stats = self.stats[url]
        if stats.throughput is not None:
            return stats.throughput
        measured = [s.throughput for s in self.stats.values() if s.throughput is not None]
        return max(measured) if measured else DEFAULT_THROUGHPUT

    def weight(self, url: str) -> float:
        stats = self.stats[url]
        return stats.success_rate() * self.throughput(url) / (CORRUPTION_PENALTY**stats.corrupt)

    def choose(self, candidates: list[str], now: float) -> str | None:
        """A source among `candidates` not in back-off, or None if all are backing off."""
        ready = [url for url in candidates if self.stats[url].backoff_until <= now]
        if not ready:
            return None
        if len(ready) == 1:
            return ready[0]
        if self.rng.random() < self.exploration:
            return self.rng.choice(ready)
        weights = [max(self.weight(url), MIN_WEIGHT) for url in ready]  # all-zero weights cannot be sampled
        return self.rng.choices(ready, weights=weights, k=1)[0]

    def record_success(self, url: str, nbytes: int, seconds: float) -> None:
        stats = self.stats[url]
        stats.successes += 1
        stats.consecutive_failures = 0
        stats.backoff_until = 0.0
        self.observe_rate(url, nbytes, seconds)

    def observe_rate(self, url: str, nbytes: int, seconds: float) -> None:
        """A measured transfer rate enters the throughput estimate (also of a request cut before the end)."""
        stats = self.stats[url]
        rate = nbytes / max(seconds, 1e-6)
        stats.throughput = (
            rate if stats.throughput is None else EWMA_ALPHA * rate + (1 - EWMA_ALPHA) * stats.throughput
        )

    def record_slow(self, url: str, nbytes: int, seconds: float, now: float) -> None:
        """A request cut below the throughput floor: a failure, and its rate is what the source delivers."""
        self.observe_rate(url, nbytes, seconds)
        self.record_failure(url, now)

    def record_failure(self, url: str, now: float) -> None:
        stats = self.stats[url]
        stats.failures += 1
        stats.consecutive_failures += 1
        delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (stats.consecutive_failures - 1))
        stats.backoff_until = now + delay

    def record_corrupt(self, url: str, now: float) -> None:
        """Bytes that fail their signed hash, or a version announced and not backed by its signed manifest:
        a failure and a lasting demotion."""
        self.stats[url].corrupt += 1
        self.record_failure(url, now)

    def ready(self, url: str, now: float) -> bool:
        return self.stats[url].backoff_until <= now

    def earliest_ready(self, candidates: list[str]) -> float:
        return min(self.stats[url].backoff_until for url in candidates)
