"""Per-node token buckets: a burst of `per_minute` requests, refilled continuously."""

from __future__ import annotations

import threading
from collections.abc import Callable


class TokenBuckets:
    def __init__(self, per_minute: int, clock: Callable[[], float], max_keys: int = 100_000) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> bool:
        """Spend one token of `key`'s bucket; False when it is empty."""
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return False
            if len(self._buckets) >= self.max_keys and key not in self._buckets:
                # Only verified signers reach here, so the map grows with real keys; shed the full ones first.
                self._buckets = {k: v for k, v in self._buckets.items() if v[0] < self.capacity}
            self._buckets[key] = (tokens - 1.0, now)
            return True
