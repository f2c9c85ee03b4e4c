"""A budget of long-lived responses (event streams) per client address and in all.

A stream holds its connection for minutes, so streams are a connection class of their own: a server grants at
most `max_streams_per_address` from one address and `max_streams_total` in all, and its connection guard
counts a connection serving a stream against this budget alone, not against the caps node traffic needs. A
stream asked for past the budget is refused (the dashboard then polls).

Used from the server's event loop only (the guard's callbacks and async handlers run there): no lock.
"""

from __future__ import annotations

from collections import Counter

from swarmrl.configs.connections import ConnectionLimits

Peer = tuple[str, int]  # the client's (address, port): one TCP connection


class StreamBudget:
    def __init__(self, per_address: int, total: int) -> None:
        self.per_address, self.total = per_address, total
        self._open: set[Peer] = set()
        self._by_address: Counter[str] = Counter()
        self.refused = 0

    @classmethod
    def of(cls, limits: ConnectionLimits) -> StreamBudget:
        return cls(limits.max_streams_per_address, limits.max_streams_total)

    @property
    def open(self) -> int:
        return len(self._open)

    def open_from(self, address: str) -> int:
        return self._by_address[address]

    def holds(self, peer: Peer) -> bool:
        return peer in self._open

    def acquire(self, peer: Peer) -> bool:
        """Count a stream on this connection; False (and counted as refused) past either cap."""
        if peer in self._open:
            return True
        if self.open_from(peer[0]) >= self.per_address or len(self._open) >= self.total:
            self.refused += 1
            return False
        self._open.add(peer)
        self._by_address[peer[0]] += 1
        return True

    def release(self, peer: Peer) -> None:
        """The stream ended or its connection closed (idempotent: both may report it)."""
        if peer not in self._open:
            return
        self._open.discard(peer)
        self._by_address[peer[0]] -= 1
        if not self._by_address[peer[0]]:
            del self._by_address[peer[0]]
