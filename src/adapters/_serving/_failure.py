"""The driver's stop when its core raises (a bug): its state is unknown and it refuses every
further call, so the server stops. Nothing it started may outlive it: every process group is
killed and reaped, every connection closed (1011); then the adapter stops as on SIGTERM, and
`serve` raises `CoreFailed` once the stop is done.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from execproto import Event

if TYPE_CHECKING:
    from .._loop import Loop
    from .._processes._children import Children
    from .._wire._connections import Connections
    from ._later import LaterRooms

log = logging.getLogger("execproto")

# How long a stop waits, once every process is finalized, for the connections to take what is
# queued for them and their close frames (a client that reads nothing must not hold the server
# up). Also after the core failed.
CLOSE_WAIT = 1.0


class CoreFailed(Exception):
    """The server stopped because its core raised (a bug). It is logged with its traceback by
    then, every connection closed (1011) and every process killed; the cause is the core's
    exception."""


class FailureStop:
    """The part of `Driver` that stops it after its core failed."""

    # The driver's, which the stop reads and ends (see `Driver`).
    loop: Loop
    connections: Connections
    children: Children
    later: LaterRooms
    failure: BaseException | None
    on_failure: Callable[[], None] | None
    on_idle: Callable[[], None] | None
    _queue: deque[Event]
    _cancel_tick: Callable[[], None] | None
    _stopping: bool

    def _core_failed(self, event: Event, exc: Exception) -> None:
        """The core raised on ``event``: everything is ended here, then the adapter's
        `on_failure` starts the same stop as SIGTERM does."""
        self.failure = exc
        self._queue.clear()
        log.critical("the server is stopping because its core failed on %s, a bug in execproto;"
                     " every connection is closed and every process killed",
                     type(event).__name__, exc_info=exc)
        if self._cancel_tick is not None:
            self._cancel_tick()
            self._cancel_tick = None
        self.connections.close_all()
        self.children.kill_all()
        if (http := self.later.http) is not None:
            http.abandon()
        if (forwards := self.later.forwards) is not None:
            forwards.close_all()
        if self._stopping:  # failed while stopping: the stop goes on, with nothing left to do
            self._stop_after_failure()
        if self.on_failure is not None:
            self.on_failure()

    def _stop_after_failure(self) -> None:
        self.loop.call_at(self.loop.now() + CLOSE_WAIT, partial(self._stopped_after_failure, True))
        self._stopped_after_failure()

    def _stopped_after_failure(self, waited: bool = False) -> None:
        """Idle, once stopping, when the last connection is gone (its close frame sent)."""
        if self._stopping and (waited or not self.connections) and self.on_idle is not None:
            self.on_idle()

    def raise_if_failed(self) -> None:
        """After the stop: raise `CoreFailed` if it was the core's failure that stopped it."""
        if self.failure is not None:
            raise CoreFailed(f"the core failed: {type(self.failure).__name__}: "
                             f"{self.failure}") from self.failure
