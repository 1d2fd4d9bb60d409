"""The files room: ``fs/*`` calls (and the executor's own file reads) on worker threads, and
the watches of ``fs/watchMissing`` (`_watch`).

The driver hands it `RunFs`; each call runs `Files.run` on a pool thread and is answered with
`FsCompleted` on the owner. A connection whose send buffer is past its high water starts no
new call (`hold`), as answers nobody reads would only pile up in memory; one that is gone has
its queued calls dropped. The pools weigh what a connection's calls cost, not only how many
run (`Weighed`).

Few clients use files: the room is made at its first action (`_serving._later`), not at every
start; the driver's `Files` keeps what must be known before that (the connections, and the
handles that outlive a call).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

from execproto import INTERNAL_ERROR, Event, FsCompleted, RpcError, RunFs, Unwatch, WatchMissing
from execproto.fs import Walk

from .._loop import Loop
from .._shares import Done, Shares, Work
from ._fs import Files
from ._watch import Watches

log = logging.getLogger("execproto")

# The pools' shares (`_shares`): 8 threads, at most 4 of a connection's calls at once; walks
# apart, fewer at once: each builds an answer of up to 50,000 entries, and how many run
# together is how much memory the allocator keeps afterwards.
FS_WORKERS, FS_PER_CONNECTION = 8, 4
WALK_WORKERS = 2  # fs/walk: two at once, one of a connection's
# A connection whose calls kept workers busy more than HEAVY seconds lately (each second
# counting half as much every HALF_LIFE seconds) is heavy.
HEAVY, HALF_LIFE = 0.5, 10.0


class Weighed(Shares):
    """Shares by cost, not count: four clients each walking 20,000 entries under 250 deny
    patterns kept both walk threads, and most of the interpreter, theirs, and another's
    fs/getMetadata waited up to a second (21 s with the patterns matched as they were).

    A heavy connection's calls wait while a light one's can start (they go behind it in the
    turn), and the heavy together run on at most half the threads: a light connection finds
    a thread at once, and fewer threads compete for the interpreter. A busy client alone
    keeps its share (half the fs threads is its four). A call's time counts while it runs, so
    a long one weighs before it ends. Nothing waits for time to pass: a heavy call may start
    whenever fewer than half the threads run heavy calls."""

    def __init__(self, post: Callable[[Callable[[], None]], None], workers: int,
                 per_owner: int, name: str) -> None:
        super().__init__(post, workers, per_owner, name)
        self._heavy_at_once = max(1, workers // 2)
        self._used: dict[Hashable, tuple[float, float]] = {}  # owner -> (seconds, as of when)
        self._since: dict[Hashable, list[float]] = {}  # owner -> when its running calls began

    def recent(self, owner: Hashable, now: float) -> float:
        """Seconds of workers' time ``owner``'s calls used lately, those running included."""
        seconds, when = self._used.get(owner, (0.0, now))
        seconds *= math.pow(0.5, (now - when) / HALF_LIFE)
        return seconds + sum(now - began for began in self._since.get(owner, ()))

    def _next(self) -> tuple[Hashable, Work, Done] | None:
        now = time.monotonic()
        heavy = {owner for owner in self._queues if self.recent(owner, now) > HEAVY}
        taken = self._skipping(heavy - self._held)  # the light first
        if taken is None and heavy:
            running = sum(len(self._since[owner]) for owner in self._since
                          if self.recent(owner, now) > HEAVY)
            if running < self._heavy_at_once:
                taken = super()._next()
        if taken is None:
            return None
        owner, work, done = taken
        self._since.setdefault(owner, []).append(now)
        return owner, partial(self._timed, owner, work, now), done

    def _skipping(self, skipped: set[Hashable]) -> tuple[Hashable, Work, Done] | None:
        """The base's next call, ``skipped``'s queues passed over as if held."""
        self._held |= skipped
        try:
            return super()._next()
        finally:
            self._held -= skipped

    def _timed(self, owner: Hashable, work: Work, began: float) -> Any:
        try:
            return work()
        finally:
            with self._lock:
                now = time.monotonic()
                running = self._since[owner]
                running.remove(began)
                if not running:
                    del self._since[owner]
                self._used[owner] = (self.recent(owner, now) + now - began, now)
                if len(self._used) > 256:  # closed connections' figures, decayed to nothing
                    self._used = {who: used for who, used in self._used.items()
                                  if self.recent(who, now) > 0.01 or who in self._since}


class FsCalls:
    """The files room of a driver: ``files`` is the driver's, ``stuck(conn)`` whether that
    connection's send buffer is past its high water now (those are held from the start)."""

    def __init__(self, loop: Loop, feed: Callable[[Event], None], files: Files,
                 stuck: Callable[[int], bool] = lambda conn: False) -> None:
        self._feed = feed
        self.files = files
        self._pool = Weighed(loop.post, FS_WORKERS, FS_PER_CONNECTION, "execproto-fs")
        self._walks = Weighed(loop.post, WALK_WORKERS, 1, "execproto-walk")
        self.watches = Watches(loop, feed, files.scope)
        # The core's actions carried out here (the driver's table takes these).
        self.run: dict[type, Callable[[Any], None]] = {
            RunFs: self._run, WatchMissing: self.watches.start, Unwatch: self.watches.stop}
        for conn in files.connections():  # blocked before the room was made
            if stuck(conn):
                self.hold(conn)

    def _run(self, action: RunFs) -> None:
        def done(outcome: Any) -> None:
            if isinstance(outcome, BaseException):  # a bug in the fs code: say so, keep serving
                log.error("%s failed", action.request.method, exc_info=outcome)
                failed = f"{action.request.method} failed: {outcome}"
                outcome = (None, RpcError(INTERNAL_ERROR, failed))
            result, error = outcome
            self._feed(FsCompleted(op=action.op, result=result, error=error))

        pool = self._walks if isinstance(action.request, Walk) else self._pool
        pool.submit(action.conn, partial(self.files.run, action.conn, action.request), done)

    def raised(self, action: RunFs, why: str) -> None:
        """Carrying out ``action`` raised: the call still gets its answer."""
        self._feed(FsCompleted(op=action.op, error=RpcError(INTERNAL_ERROR, f"failed: {why}")))

    def hold(self, conn: int) -> None:
        self._pool.hold(conn)
        self._walks.hold(conn)

    def release(self, conn: int) -> None:
        self._pool.release(conn)
        self._walks.release(conn)

    def drop(self, conn: int) -> None:
        self._pool.drop(conn)
        self._walks.drop(conn)

    def close(self) -> None:
        self._pool.close()
        self._walks.close()
