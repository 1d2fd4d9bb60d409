"""The http room: ``http/request`` calls in flight, each on a worker thread of the http pool.

The driver hands it `RunHttp` and `CancelHttp`; each call's worker (`_http.fetch`) posts its
events back to the owner in order: `HttpResponded`, then for a streamed response each
`HttpBodyReceived` and `HttpFinished`. A streamed body is paced by its client: a worker hands
over at most HTTP_PIECES_AHEAD pieces not yet sent on, and none while the client's connection
is blocked, so a client that reads slowly holds a few pieces here, not the whole body.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs

from execproto import CancelHttp, Event, HttpBodyReceived, HttpFinished, HttpResponded, RunHttp

from .._loop import Loop
from .._shares import Shares
from . import _http

log = logging.getLogger("execproto")

# Body pieces of one streamed http response handed to the owner and not yet sent on: the
# worker reads no further, and none are handed over while the client's connection is blocked.
HTTP_PIECES_AHEAD = 4
HTTP_RECHECK = 0.05  # seconds between looks at a blocked connection, for a waiting stream
HTTP_PER_CONNECTION = 4  # of the pool's `_http.WORKERS` threads, one connection's at most


@attrs.define
class Call:
    """One call in flight: set ``cancelled`` to abandon it."""

    conn: int  # the connection it answers on
    streaming: bool  # whether its body comes as events of their own
    cancelled: threading.Event = attrs.Factory(threading.Event)


def _ignore(result: Any) -> None:
    """An http call's work answers for itself, through `post`."""


class HttpCalls:
    """``stuck(conn)``: whether that connection's send buffer is past its high water."""

    def __init__(self, loop: Loop, feed: Callable[[Event], None],
                 stuck: Callable[[int], bool]) -> None:
        self.loop = loop
        self._feed = feed
        self._stuck = stuck
        self._calls: dict[int, Call] = {}  # by op
        self._pool = Shares(loop.post, _http.WORKERS, HTTP_PER_CONNECTION, "execproto-http")
        self.run: dict[type, Callable[[Any], None]] = {RunHttp: self._run, CancelHttp: self._cancel}

    def _run(self, action: RunHttp) -> None:
        request = action.request
        call = self._calls[action.op] = Call(conn=action.conn, streaming=request.stream_response)
        post, op, cancelled = self.loop.post, action.op, call.cancelled
        credit = threading.Semaphore(HTTP_PIECES_AHEAD)

        def work() -> None:
            # On a worker thread: every event goes back to the owner through `post`, in order.
            try:
                head, pieces = _http.fetch(request, cancelled)
                if not request.stream_response:
                    body = _http.whole(pieces, request.url)
                    post(lambda: self._event(HttpResponded(
                        op=op, status=head.status, headers=tuple(head.headers), body=body)))
                    return
                post(lambda: self._event(HttpResponded(
                    op=op, status=head.status, headers=tuple(head.headers))))
                for piece in pieces:
                    if piece:
                        while not credit.acquire(timeout=_http.SLICE):
                            if cancelled.is_set():
                                return
                        post(partial(self._event, HttpBodyReceived(op=op, data=piece),
                                     credit.release))
                post(lambda: self._event(HttpFinished(op=op)))
            except Exception as exc:  # a failure, or a bug: either way the call gets an answer
                if not isinstance(exc, _http.HttpFailure):
                    log.exception("http/request failed")
                why = str(exc)
                post(lambda: self._event(HttpFinished(op=op, error=why)))

        self._pool.submit(action.conn, work, _ignore)

    def _event(self, event: HttpResponded | HttpBodyReceived | HttpFinished,
               sent: Callable[[], None] | None = None) -> None:
        call = self._calls.get(event.op)
        if call is None:
            return  # cancelled: its connection closed, and the core has forgotten the call
        if isinstance(event, HttpFinished) or (isinstance(event, HttpResponded)
                                               and not call.streaming):
            del self._calls[event.op]
        self._feed(event)
        if sent is not None:
            self._next_piece(event.op, call.conn, sent)

    def _next_piece(self, op: int, conn: int, sent: Callable[[], None]) -> None:
        """Let a streamed body's worker hand over another piece, once its client keeps up."""
        if op in self._calls and self._stuck(conn):
            self.loop.call_at(self.loop.now() + HTTP_RECHECK,
                              lambda: self._next_piece(op, conn, sent))
        else:
            sent()

    def _cancel(self, action: CancelHttp) -> None:
        call = self._calls.pop(action.op, None)
        if call is not None:
            call.cancelled.set()

    def raised(self, action: RunHttp, why: str) -> None:
        """Carrying out ``action`` raised: the call gets its answer, and whatever its worker
        may still post is dropped."""
        self._calls.pop(action.op, None)
        self._feed(HttpFinished(op=action.op, error=why))

    def drop(self, conn: int) -> None:
        """``conn`` is gone: its calls still queued are not run (nobody would read them)."""
        self._pool.drop(conn)

    def cancel_all(self) -> None:
        """The stop, or the core's failure: every call's worker gives up."""
        for call in self._calls.values():
            call.cancelled.set()

    def abandon(self) -> None:
        """The core failed: cancel every call and forget it."""
        self.cancel_all()
        self._calls.clear()
