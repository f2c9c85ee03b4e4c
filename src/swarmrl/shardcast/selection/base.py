"""What a client or relay learns about its sources, and the interface of a policy that picks among them.

Every policy keeps the same record: successes and failures, corrupt data sent (bytes failing their signed hash,
forged manifests, false announcements), a throughput estimate (EWMA of bytes/s; an unmeasured source borrows
the best measured one so it gets tried) and an exponential back-off after each failure. A request cut for
being slower than the throughput floor is a failure whose observed rate also enters the estimate. The round
trip of small requests (a source's version list) is kept too, as the shortest of the last few: `near` names
the sources close to this node, the relay of its own region, which a downloader prefers over a distant one that
holds the bytes sooner. A policy only decides the order: `ranked` (whom to ask first for a manifest or an
announcement, whom to hedge to) and `pick` (which ready source gets the next shard request).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

EWMA_ALPHA = 0.3
DEFAULT_THROUGHPUT = 1e6
# A source is near when its round trip is within twice the nearest one's plus this: on one machine or one
# LAN every source is near (no preference); across regions only the local relay is.
NEAR_SLACK_S = 0.05
# A source's round trip is the shortest of its last this many answers: distance is what `near` is about, and a
# connection's handshake, a busy server or a full link only ever add to it. An average would let the local
# relay, slow to answer while it mirrors a version on a loaded machine, make a relay 100 ms away look near.
ROUND_TRIP_WINDOW = 16


@dataclass
class SourceStats:
    url: str
    successes: int = 0
    failures: int = 0
    corrupt: int = 0
    throughput: float | None = None
    round_trips: deque[float] = field(default_factory=lambda: deque(maxlen=ROUND_TRIP_WINDOW))
    consecutive_failures: int = 0
    backoff_until: float = 0.0
    unreachable: bool = False  # its last failure: it could not be reached (down, restarting)

    @property
    def round_trip(self) -> float | None:
        return min(self.round_trips, default=None)

    @property
    def measuring(self) -> bool:
        """Its window of round trips is not full yet: worth another sample."""
        return len(self.round_trips) < ROUND_TRIP_WINDOW

    def success_rate(self) -> float:
        """Smoothed with a Beta(1,1) prior: (ok + 1) / (ok + failed + 2)."""
        return (self.successes + 1) / (self.successes + self.failures + 2)


class SourcePolicy(ABC):
    """The record of every source, and the order in which a subclass asks them."""

    def __init__(self, urls: list[str], backoff_base_s: float = 0.25, backoff_max_s: float = 10.0) -> None:
        self.stats = {url: SourceStats(url) for url in urls}
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s

    @abstractmethod
    def ranked(self, candidates: list[str]) -> list[str]:
        """`candidates`, the one to ask first first."""

    @abstractmethod
    def pick(self, ready: list[str]) -> str:
        """The source among `ready` (two or more, none backing off) that gets the next request."""

    def choose(self, candidates: list[str], now: float) -> str | None:
        """A source among `candidates` not in back-off, or None if all are backing off."""
        ready = [url for url in candidates if self.ready(url, now)]
        if len(ready) <= 1:
            return ready[0] if ready else None
        return self.pick(ready)

    def add(self, url: str) -> None:
        self.stats.setdefault(url, SourceStats(url))

    def throughput(self, url: str) -> float:
        """Bytes/s expected from `url`: its estimate, or the best measured one while it is unmeasured."""
        stats = self.stats[url]
        if stats.throughput is not None:
            return stats.throughput
        measured = [s.throughput for s in self.stats.values() if s.throughput is not None]
        return max(measured) if measured else DEFAULT_THROUGHPUT

    def observe_round_trip(self, url: str, seconds: float) -> None:
        """The time a small request to `url` took to answer (its round trip, plus the server's time)."""
        self.stats[url].round_trips.append(seconds)

    def near(self, candidates: list[str]) -> list[str]:
        """The candidates whose measured round trip is within twice the shortest plus NEAR_SLACK_S; every
        candidate while none is measured. A source never measured is not near (it has not answered yet)."""
        measured = {u: trip for u in candidates if (trip := self.stats[u].round_trip) is not None}
        if not measured:
            return list(candidates)
        limit = 2 * min(measured.values()) + NEAR_SLACK_S
        return [u for u in candidates if u in measured and measured[u] <= limit]

    def ranked_near_first(self, candidates: list[str]) -> list[str]:
        """`ranked`, the near sources before the others: whom to ask for something small (a manifest), whose
        cost is mostly the round trip."""
        near = set(self.near(candidates))
        return self.ranked([u for u in candidates if u in near]) + self.ranked(
            [u for u in candidates if u not in near]
        )

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

    def record_failure(self, url: str, now: float, *, unreachable: bool = False) -> None:
        """A failed request; `unreachable`: the source could not be reached or did not answer at all."""
        stats = self.stats[url]
        stats.failures += 1
        stats.consecutive_failures += 1
        delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (stats.consecutive_failures - 1))
        stats.backoff_until = now + delay
        stats.unreachable = unreachable

    def record_reachable(self, url: str) -> None:
        """`url` answered a small request. If it last failed only for being out of reach (a relay down and
        restarted), it is back: its back-off ends, so the shards it holds are not waited out for up to
        `backoff_max_s`. A source backing off for being slow or for bad bytes keeps its back-off: answering
        small requests costs a trickling or lying source nothing."""
        stats = self.stats[url]
        if stats.unreachable:
            stats.consecutive_failures = 0
            stats.backoff_until = 0.0
            stats.unreachable = False

    def record_corrupt(self, url: str, now: float) -> None:
        """Bytes that fail their signed hash, or a version announced and not backed by its signed manifest:
        a failure and a lasting demotion."""
        self.stats[url].corrupt += 1
        self.record_failure(url, now)

    def ready(self, url: str, now: float) -> bool:
        return self.stats[url].backoff_until <= now

    def earliest_ready(self, candidates: list[str]) -> float:
        return min(self.stats[url].backoff_until for url in candidates)
