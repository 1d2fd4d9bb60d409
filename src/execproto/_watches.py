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

from typing import TYPE_CHECKING

from . import _fs_params
from ._errors import LocalProtocolError
from ._fs_actions import Unwatch, WatchMissing
from ._fs_events import MissingChanged
from ._jsonrpc import Id, encode_notification
from ._policy import narrow
from ._services import _Op
from ._session import Connection, Session
from .actions import Send
from .fs import Watch

if TYPE_CHECKING:
    from ._services import ServiceHandlers


class Watches:
    """The watches of one core's connections (part of its fs family, `_fs_service`)."""

    def __init__(self, core: ServiceHandlers) -> None:
        self.core = core
        self._watch_of: dict[int, tuple[int, int]] = {}  # conn -> (watch, client's watchId)
        self._next_watch = 1
        self._last_id: dict[int, int] = {}  # conn -> the highest watchId it sent

    def watch_missing(self, c: Connection, session: Session, msg_id: Id, request: Watch) -> None:
        _fs_params.watch_limit(request)
        core = self.core
        last = self._last_id.get(c.conn)
        if last is not None and request.watch_id <= last:
            core._respond(c.conn, msg_id, {"watching": False})
            return
        self._last_id[c.conn] = request.watch_id
        self._drop_watch(c)
        if not request.missing:
            core._respond(c.conn, msg_id, {"watching": False})
            return
        watch = self._next_watch
        self._next_watch += 1
        self._watch_of[c.conn] = (watch, request.watch_id)
        op = core._take_op()
        core._ops[op] = _Op(c.conn, msg_id, request)
        c.ops.add(op)
        config = core.config
        core._emit(WatchMissing(op=op, watch=watch, missing=request.missing,
                                present=request.present,
                                sandbox=narrow(config.floor, None, config.secrets,
                                               config.protected)))

    def changed(self, event: MissingChanged) -> None:
        if not 0 < event.watch < self._next_watch:
            raise LocalProtocolError(f"watch {event.watch} was never issued")
        for conn, (watch, watch_id) in self._watch_of.items():
            if watch == event.watch:
                del self._watch_of[conn]
                notification = encode_notification("fs/missingChanged", {"watchId": watch_id})
                self.core._emit(Send(conn=conn, data=notification))
                return
        # Otherwise it was replaced or its connection closed while the adapter had it queued.

    def closed(self, c: Connection) -> None:
        self._drop_watch(c)
        self._last_id.pop(c.conn, None)

    def _drop_watch(self, c: Connection) -> None:
        """End the connection's watch, if it has one."""
        current = self._watch_of.pop(c.conn, None)
        if current is not None:
            self.core._emit(Unwatch(watch=current[0]))
