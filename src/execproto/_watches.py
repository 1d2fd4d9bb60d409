"""``fs/watchMissing``: one watch per connection, told once with ``fs/missingChanged``.

Watch ids only grow: a call whose ``watchId`` is not above every id the connection sent before
is stale (a reordered request, say) and is answered ``watching: false`` without touching the
current watch, as the reference does (measured). The adapter checks the paths and watches them
(`WatchMissing`, answered like an fs call); the core decides which watch is current and where
its one notification goes. Every call replaces the connection's watch (``missing: []`` is how a
client unwatches), a watch ends when it fires, and closing the connection ends it too, so a
notification never reaches a closed connection or a client that moved on to another watch.
"""

from __future__ import annotations

from typing import Any

from . import _fs_params
from ._errors import LocalProtocolError
from ._jsonrpc import Id, encode_notification
from ._policy import narrow
from ._services import ServiceHandlers, _Op
from ._session import Connection, Session
from .actions import FsRequest, Send, Unwatch, WatchMissing
from .events import MissingChanged


class WatchHandlers(ServiceHandlers):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watch_of: dict[int, tuple[int, int]] = {}  # conn -> (watch, client's watchId)
        self._next_watch = 1
        self._last_id: dict[int, int] = {}  # conn -> the highest watchId it sent

    def _watch_missing(
        self, c: Connection, session: Session, msg_id: Id, params: dict[str, Any]
    ) -> None:
        _fs_params.watch_limit(params)
        last = self._last_id.get(c.conn)
        if last is not None and params["watchId"] <= last:
            self._respond(c.conn, msg_id, {"watching": False})
            return
        self._last_id[c.conn] = params["watchId"]
        self._drop_watch(c)
        if not params["missing"]:
            self._respond(c.conn, msg_id, {"watching": False})
            return
        watch = self._next_watch
        self._next_watch += 1
        self._watch_of[c.conn] = (watch, params["watchId"])
        op = self._take_op()
        request = FsRequest(method="fs/watchMissing", params=params)
        self._ops[op] = _Op(c.conn, msg_id, request)
        c.ops.add(op)
        self._emit(WatchMissing(op=op, watch=watch, missing=params["missing"],
                                present=params["present"],
                                sandbox=narrow(self.config.floor, None, self.config.secrets,
                                               self.config.protected)))

    def _on_missing_changed(self, event: MissingChanged) -> None:
        if not 0 < event.watch < self._next_watch:
            raise LocalProtocolError(f"watch {event.watch} was never issued")
        for conn, (watch, watch_id) in self._watch_of.items():
            if watch == event.watch:
                del self._watch_of[conn]
                notification = encode_notification("fs/missingChanged", {"watchId": watch_id})
                self._emit(Send(conn=conn, data=notification))
                return
        # Otherwise it was replaced or its connection closed while the adapter had it queued.

    def _connection_watches_closed(self, c: Connection) -> None:
        self._drop_watch(c)
        self._last_id.pop(c.conn, None)

    def _drop_watch(self, c: Connection) -> None:
        """End the connection's watch, if it has one."""
        current = self._watch_of.pop(c.conn, None)
        if current is not None:
            self._emit(Unwatch(watch=current[0]))
