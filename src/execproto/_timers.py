"""Deadlines keyed by what they are for, so setting a key again replaces its deadline.

The server's keys are ``(Timer, subject)`` (see `_lifecycle.Timer`); any hashable key works.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable


class Timers:
    """A heap with lazy deletion: an entry counts only while ``_due[key]`` still names it."""

    __slots__ = ("_heap", "_due", "_counter")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, tuple[float, int]] = {}
        self._counter = 0

    def set(self, key: Hashable, when: float) -> None:
        self._counter += 1
        self._due[key] = (when, self._counter)
        heapq.heappush(self._heap, (when, self._counter, key))

    def cancel(self, key: Hashable) -> None:
        self._due.pop(key, None)

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap and self._due.get(heap[0][2]) != heap[0][:2]:
            heapq.heappop(heap)  # stale: cancelled or replaced
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> Hashable | None:
        """Remove and return the earliest key due at or before ``now``, if any.

        One at a time, so that what the caller does for one deadline (cancelling another) is
        seen before the next is popped.
        """
        when = self.next_deadline()
        if when is None or when > now:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._due[key]
        return key
