"""``environment/*``, and the calls the adapter works on: file calls and ``http/request``.

The two families of calls that the adapter runs off the owner, files (`_fs_service`) and
``http/request`` (`_http_service`), are each made at their first call, not at every start; the
calls in flight of both are kept here, in one table of ops, so a closed connection's go with it
whichever they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import LocalProtocolError
from ._jsonrpc import Id
from ._session import Connection, Session
from ._state import CoreState

if TYPE_CHECKING:
    from .fs import FsRequest


class _Op:
    """A call the adapter is working on, and where its answer goes."""

    __slots__ = ("conn", "id", "request", "request_id", "answered", "streaming", "seq")

    def __init__(self, conn: int, msg_id: Id, request: FsRequest | None) -> None:
        self.conn = conn
        self.id = msg_id
        self.request = request  # None for http
        self.answered = False
        self.request_id = ""
        self.streaming = False  # an http response whose body comes as notifications
        self.seq = 0


class ServiceHandlers(CoreState):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ops: dict[int, _Op] = {}

    def _environment_info(self, c: Connection, session: Session, msg_id: Id, _: None) -> None:
        self._respond(c.conn, msg_id, self.host.environment_info)

    def _environment_status(self, c: Connection, session: Session, msg_id: Id, _: None) -> None:
        # The only status the reference has: an initialized connection is ready.
        self._respond(c.conn, msg_id, {"status": "ready"})

    # -- bookkeeping ----------------------------------------------------------------------------

    def _take_entry(self, op: int) -> _Op | None:
        entry = self._ops.pop(op, None)
        if entry is None:
            self._stale(op)
            return None
        c = self._conns[entry.conn]
        c.ops.discard(op)
        if entry.streaming:
            c.http_streams.pop(entry.request_id, None)
        return entry

    def _stale(self, op: int) -> None:
        """An answer for an op whose connection closed is dropped; an op never issued is a bug."""
        if not 0 < op < self._next_op:
            raise LocalProtocolError(f"operation {op} was never issued")

    def _drop_ops(self, c: Connection) -> None:
        """The connection closed: forget its calls and stop its response streams."""
        for op in sorted(c.ops):
            entry = self._ops.pop(op)
            if entry.request is None:  # an http call's: its module is loaded by then
                from ._http_actions import CancelHttp

                self._emit(CancelHttp(op=op))
        c.ops.clear()
        c.http_streams.clear()
