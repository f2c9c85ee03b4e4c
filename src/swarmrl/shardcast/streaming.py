"""Cut-through: a relay serves a shard while its bytes still arrive from upstream, holding back its last byte
until the shard verifies.

Store-and-forward costs every relay hop a whole shard's transfer before the first byte moves on (a 50 MB shard
over 20 Mbit/s: 20 s a hop). Here a mirroring relay registers each shard request it sends upstream (the one
writing in place, not a hedge's scratch copy); a client asking for that shard gets the bytes as they land.
The range's last byte leaves only once that very request's bytes hashed to the signed digest. When the request
fails, is cut or loses to a hedge, the response is aborted short, so a client never completes a shard this
relay did not verify: it sees a broken transfer (retried), never a corrupt one that would demote the relay for
its upstream's lie.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from swarmrl.shardcast.manifest import ShardEntry
from swarmrl.shardcast.range_get import RangeSink

# A mirroring relay writes a shard's bytes (and so can pass them on) once this many have gathered.
STREAM_WRITE_BATCH = 64 * 1024


@dataclass
class InFlight:
    """One upstream request of a relay for one shard, written in place as it arrives. Readers on any event loop
    `watch` it: they are woken when bytes land and when the request ends."""

    version: int
    shard: ShardEntry
    sink: RangeSink
    verified: bool | None = None  # None: running; True: its bytes hashed right; False: failed, cut or lost
    _watchers: dict[asyncio.Event, asyncio.AbstractEventLoop] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def landed(self) -> int:
        """Bytes of the shard on disk, from its start, written by this request."""
        return self.sink.written

    @contextlib.contextmanager
    def watch(self) -> Iterator[asyncio.Event]:
        """An event (of the running loop) set at every change; clear it before looking at the request."""
        event = asyncio.Event()
        with self._lock:
            self._watchers[event] = asyncio.get_running_loop()
        try:
            yield event
        finally:
            with self._lock:
                self._watchers.pop(event, None)

    def wake(self) -> None:
        """From any thread: bytes landed or the request ended."""
        with self._lock:
            watchers = list(self._watchers.items())
        for event, loop in watchers:
            with contextlib.suppress(RuntimeError):  # a loop that closed meanwhile
                loop.call_soon_threadsafe(event.set)


class InFlightShards:
    """The shard requests a relay has in flight upstream, by (version, shard index); safe from any thread."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._flights: dict[tuple[int, int], InFlight] = {}
        self._lock = threading.Lock()
        self._on_change = on_change  # wakes long polls of availability: a shard became servable

    def started(self, version: int, shard: ShardEntry, sink: RangeSink) -> InFlight:
        """Register a request about to run; its sink's `on_bytes` then also wakes the request's readers."""
        flight = InFlight(version, shard, sink)
        counted = sink.on_bytes

        def landed(nbytes: int) -> None:
            counted(nbytes)
            flight.wake()

        sink.on_bytes = landed
        with self._lock:
            self._flights[(version, shard.index)] = flight
        if self._on_change is not None:
            self._on_change()
        return flight

    def ended(self, flight: InFlight, verified: bool) -> None:
        """A request is over. A verified one stays listed (its bytes are the shard's) until `recorded`, so the
        shard never drops out of the relay's availability between the two; a failed one is unlisted unless a
        newer request for the shard has taken its place."""
        key = (flight.version, flight.shard.index)
        with self._lock:
            flight.verified = verified
            if not verified and self._flights.get(key) is flight:
                del self._flights[key]
        flight.wake()

    def recorded(self, version: int, index: int) -> None:
        """The store now lists the shard as verified."""
        with self._lock:
            self._flights.pop((version, index), None)

    def indices(self, version: int) -> set[int]:
        with self._lock:
            return {index for (held, index) in self._flights if held == version}

    def covering(self, version: int, shards: list[ShardEntry], start: int, stop: int) -> InFlight | None:
        """The request in flight for the one shard of `shards` (a file's, in order) that holds [start, stop)."""
        with self._lock:
            for shard in shards:
                if shard.offset <= start and stop <= shard.offset + shard.length:
                    return self._flights.get((version, shard.index))
        return None

    def forget(self, version: int) -> None:
        """A collected version: its requests are over (each also ends on its own)."""
        with self._lock:
            gone = [self._flights.pop(k) for k in [k for k in self._flights if k[0] == version]]
        for flight in gone:
            flight.verified = False
            flight.wake()
