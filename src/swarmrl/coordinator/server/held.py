"""The work lease requests held at this coordinator now, and how fast each one's node returns its units.

When a step opens, every node waiting for room wakes at once, and the open step's units went to whoever looked
first: often a distant or slow node, whose file the step then waited for. A woken request of a node
FASTER_BY times slower than the fastest node held with it looks FASTER_FIRST_S later, so the units go first to
whoever returns them soonest: a node's measured time per unit spans its lease to its submission, its round
trips and upload included, and only accepted files measure it (junk delivered at once makes no one fast). A node
not measured yet counts as slower than every measured one (identities are free: a fresh key is no one's first
choice), and unmeasured nodes draw lots among themselves: each looks after a random extra delay below
LOTTERY_S, so a unit freed in the unproven pool goes to a random waiting key, not to whichever polls hardest.
Each request asks in O(log n), however many wait.
"""

from __future__ import annotations

import heapq
import random
import threading

FASTER_BY = 1.5
FASTER_FIRST_S = 0.1
LOTTERY_S = 0.25
_DRAW = random.SystemRandom()


class HeldLeases:
    """Held lease requests per run, with the fastest measured node among them kept at the top of a heap
    (entries of requests that ended are dropped when they reach the top, or all at once when they outnumber
    the live ones)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, dict[str, float | None]] = {}  # run → node → seconds per unit
        self._fastest: dict[str, list[tuple[float, str]]] = {}  # run → heap of (seconds, node)

    def hold(self, run_id: str, node_id: str, seconds: float | None) -> None:
        with self._lock:
            held = self._seconds.setdefault(run_id, {})
            if node_id in held and held[node_id] == seconds:
                return  # its other request, held already
            held[node_id] = seconds
            if seconds is not None:
                heapq.heappush(self._fastest.setdefault(run_id, []), (seconds, node_id))

    def release(self, run_id: str, node_id: str) -> None:
        with self._lock:
            held = self._seconds.get(run_id)
            if held is None:
                return
            held.pop(node_id, None)
            heap = self._fastest.get(run_id, [])
            if not held:
                self._seconds.pop(run_id)
                self._fastest.pop(run_id, None)
            elif len(heap) > 2 * len(held) + 16:
                self._fastest[run_id] = list({(s, n) for s, n in heap if held.get(n) == s})
                heapq.heapify(self._fastest[run_id])

    def delay(self, run_id: str, node_id: str) -> float:
        """Seconds a woken request of `node_id` waits before it looks: FASTER_FIRST_S when a node held with it
        is FASTER_BY times faster, else 0; an unmeasured node's, plus its draw below LOTTERY_S."""
        with self._lock:
            held = self._seconds.get(run_id, {})
            heap = self._fastest.get(run_id, [])
            while heap and held.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)  # a request that ended, or the node's earlier one
            mine = held.get(node_id)
            draw = _DRAW.uniform(0.0, LOTTERY_S) if node_id in held and mine is None else 0.0
            if not heap:
                return draw
            return draw + (FASTER_FIRST_S if mine is None or heap[0][0] * FASTER_BY <= mine else 0.0)
