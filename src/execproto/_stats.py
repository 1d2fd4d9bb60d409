"""What the server core counts for an operator's metrics: plain numbers, no I/O.

The core adds to these as it handles events (a request answered, a process finished, output
read), with the time it is given; an adapter reads them when scraped (`/metrics`) and exposes
them in whatever format it likes. Label values come from closed sets (the core's own method
names, a few results), so no client can make the series grow without bound.
"""

from __future__ import annotations

import bisect
from typing import Any

# Upper bounds (seconds) of the duration histograms' buckets: from a fast fs call to a long
# build; +Inf is implied.
REQUEST_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0, 60.0)
PROCESS_BUCKETS = (0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0)

# A request's method as a label: one of the server's own, or this.
OTHER_METHOD = "other"


class Histogram:
    """Counts of observations by bucket (not cumulative), their sum and their number."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last is past every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or under it), ending with (inf, count)."""
        out, total = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append((bound, total))
        return out


class Stats:
    """The server's counters since it started. `ServerCore.stats` is one."""

    def __init__(self, methods: frozenset[str]) -> None:
        self._methods = methods
        self.connections_total = 0
        self.requests: dict[tuple[str, str], int] = {}  # (method, "ok" | "error") -> count
        self.request_seconds: dict[str, Histogram] = {}  # by method
        self.processes_started = 0
        self.processes_finished: dict[str, int] = {}  # by result: see `process_finished`
        self.process_seconds = Histogram(PROCESS_BUCKETS)
        self.output_bytes = 0
        self.stdin_bytes = 0
        self.closed_by_server: dict[str, int] = {}  # connections the core closed, by close code
        # conn -> request id -> (method, when it arrived): the requests not yet answered.
        self._pending: dict[int, dict[Any, tuple[str, float]]] = {}
        self._spawned: dict[int, float] = {}  # proc -> when it was spawned

    def method(self, name: str) -> str:
        return name if name in self._methods else OTHER_METHOD

    # -- connections and requests ---------------------------------------------------------------

    def connection_opened(self, conn: int) -> None:
        self.connections_total += 1
        self._pending[conn] = {}

    def connection_closed(self, conn: int) -> None:
        self._pending.pop(conn, None)  # what it never got an answer to is not counted

    def server_closed(self, reason: str) -> None:
        self.closed_by_server[reason] = self.closed_by_server.get(reason, 0) + 1

    def request(self, conn: int, msg_id: Any, method: str, now: float) -> None:
        pending = self._pending.get(conn)
        if pending is not None and isinstance(msg_id, (int, str)):
            pending[msg_id] = (self.method(method), now)

    def answered(self, conn: int, msg_id: Any, ok: bool, now: float) -> None:
        pending = self._pending.get(conn)
        if pending is None or not isinstance(msg_id, (int, str)):
            return
        found = pending.pop(msg_id, None)
        if found is None:
            return
        method, since = found
        key = (method, "ok" if ok else "error")
        self.requests[key] = self.requests.get(key, 0) + 1
        histogram = self.request_seconds.get(method)
        if histogram is None:
            histogram = self.request_seconds[method] = Histogram(REQUEST_BUCKETS)
        histogram.observe(now - since)

    # -- processes ------------------------------------------------------------------------------

    def process_spawned(self, proc: int, now: float) -> None:
        self.processes_started += 1
        self._spawned[proc] = now

    def process_finished(self, proc: int, result: str, now: float) -> None:
        """``result``: "success" (exit code 0), "failure" (any other exit), "timed_out", or
        "spawn_failed"."""
        self.processes_finished[result] = self.processes_finished.get(result, 0) + 1
        since = self._spawned.pop(proc, None)
        if since is not None:
            self.process_seconds.observe(now - since)
