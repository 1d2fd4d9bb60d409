"""Port forwarding (execproto's extension): streams into a session's network.

``forward/open`` asks the adapter for a TCP stream from inside the session's network (the one
its sandboxes with the network share), so a client reaches what a sandbox serves there and
nothing a sandbox could not reach. Where the backend gives sandboxes no network of their own,
the stream may go to the server host's loopback instead, only if the operator said so
(``Config.forward_loopback``) and never to the server's own ports: that rule is here
(`_forward_params.host_route_refusal`), decided on what the adapter reported, and the adapter
only connects and moves bytes. Each stream's state is a `ForwardStream`.

A stream belongs to the connection that opened it: its bytes go there, and it closes with it.
It ends too with the session whose network it reaches (that network goes). The bounds: streams
open per session and per server (`Config`), the target's bytes in flight per stream (the
window), the client's bytes waiting to be written per stream and in all (`_forward_params`).
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._errors import INTERNAL_ERROR, LocalProtocolError, RpcError, invalid_request
from ._forward_actions import (
    CloseForward,
    OpenForward,
    PauseForward,
    ResumeForward,
    WriteForward,
)
from ._forward_events import (
    ForwardConnected,
    ForwardEnded,
    ForwardFailed,
    ForwardReceived,
    ForwardUnrouted,
    ForwardWritten,
)
from ._forward_stream import WINDOW_BYTES, WINDOW_CHUNKS, ForwardStream, Phase
from ._jsonrpc import Id, encode_notification
from ._session import Connection, Session
from ._state import CoreState
from .actions import Send

if TYPE_CHECKING:
    from . import _forward_params as params

_DATA = b'{"jsonrpc":"2.0","method":"forward/data","params":{"streamId":'


def _parser(name: str) -> Callable[[Any], Any]:
    """`_forward_params`' parser ``name``, its module imported at the first forward call: few
    clients forward, and its classes stay out of a server's start."""
    def parse(raw: Any) -> Any:
        from . import _forward_params

        return getattr(_forward_params, name)(raw)

    return parse


class Forwarding:
    """The forwarded streams of one core, made at its first ``forward/*`` call or forward
    event (`ServerCore`): with its module, events and actions, which no start pays for. It
    keeps the streams, and answers and emits through the core's own state."""

    def __init__(self, core: CoreState) -> None:
        self.core = core
        self.config = core.config
        self._forwards: dict[int, ForwardStream] = {}  # by the core's handle
        self._forward_ids: dict[tuple[int, int], int] = {}  # (conn, streamId) -> handle
        self._forward_next: dict[int, int] = {}  # conn -> its next streamId
        self._next_stream = 1
        self._forward_total = 0  # bytes asked to be written, all streams
        # What it answers and emits goes into the actions of the core's call under way.
        self._emit = core._emit
        self._respond = core._respond
        self._fail = core._fail

    def methods(self) -> dict[str, tuple[Callable[[Any], Any], Callable[..., None]]]:
        return {
            "forward/open": (_parser("forward_open"), self._forward_open),
            "forward/write": (_parser("forward_write"), self._forward_write),
            "forward/ack": (_parser("forward_ack"), self._forward_ack),
            "forward/close": (_parser("forward_close"), self._forward_close),
        }

    def event_handlers(self) -> dict[type, Callable[[Any], None]]:
        return {ForwardConnected: self._on_forward_connected,
                ForwardUnrouted: self._on_forward_unrouted,
                ForwardFailed: self._on_forward_failed,
                ForwardReceived: self._on_forward_received,
                ForwardEnded: self._on_forward_ended,
                ForwardWritten: self._on_forward_written}

    def issued_stream(self, event: Any) -> None:
        """A handle the core never issued is the adapter's bug; one it forgot is expected
        (the adapter may have queued its events before it carried out the close)."""
        if event.stream not in self._forwards and not 0 < event.stream < self._next_stream:
            raise LocalProtocolError(f"forward stream {event.stream} was never issued")

    # -- the client's calls ---------------------------------------------------------------------

    def _forward_open(self, c: Connection, session: Session, msg_id: Id,
                      p: params.OpenParams) -> None:
        target = session
        if p.session_id is not None and p.session_id != session.session_id:
            found = self.core._sessions.get(p.session_id)
            if found is None:
                raise invalid_request(f"unknown session id {p.session_id}")
            target = found
        ours = sum(1 for s in self._forwards.values() if s.conn == c.conn)
        if ours >= self.config.max_session_forwards:
            raise invalid_request(
                f"too many forwards: a session keeps at most {self.config.max_session_forwards}"
                " streams open at once; close some first")
        if len(self._forwards) >= self.config.max_forwards:
            raise invalid_request(f"too many forwards: this server keeps at most "
                                  f"{self.config.max_forwards} streams open at once")
        handle = self._next_stream
        self._next_stream += 1
        stream_id = self._forward_next.get(c.conn, 1)
        self._forward_next[c.conn] = stream_id + 1
        stream = ForwardStream(handle, stream_id, c.conn, target.session_id, (p.host, p.port),
                               msg_id)
        self._forwards[handle] = stream
        self._forward_ids[(c.conn, stream_id)] = handle
        self._emit(OpenForward(stream=handle, session_id=target.session_id, host=p.host,
                               port=p.port))

    def _client_stream(self, c: Connection, stream_id: int) -> ForwardStream | None:
        handle = self._forward_ids.get((c.conn, stream_id))
        stream = None if handle is None else self._forwards.get(handle)
        return stream if stream is not None and stream.phase is Phase.OPEN else None

    def _forward_write(self, c: Connection, session: Session, msg_id: Id,
                       p: params.WriteParams) -> None:
        from . import _forward_params as params  # loaded by the call's parse

        stream = self._client_stream(c, p.stream_id)
        if stream is None:
            raise invalid_request(f"unknown forward stream {p.stream_id}")
        if stream.our_eof:
            raise invalid_request(f"forward stream {p.stream_id} has sent its EOF already")
        size = len(p.data)
        if stream.backlog + size > params.MAX_WRITE_BACKLOG:
            raise invalid_request(
                f"forward stream {p.stream_id} is not reading: {stream.backlog} bytes wait to be "
                "written to it; wait for the writes to be answered")
        if self._forward_total + size > params.MAX_WRITE_TOTAL:
            raise invalid_request("the server's forward write buffers are full; try again")
        self._forward_total += size
        if stream.write(msg_id, size, p.eof):
            self._respond(c.conn, msg_id, {})
        if size or p.eof:
            self._emit(WriteForward(stream=stream.stream, data=p.data, eof=p.eof))
        self._maybe_done(stream)

    def _forward_ack(self, c: Connection, session: Session, msg_id: Id,
                     p: params.AckParams) -> None:
        stream = self._client_stream(c, p.stream_id)
        if stream is not None:
            stream.acked(p.seq)
            self._sync_forward(stream)
        self._respond(c.conn, msg_id, {})

    def _forward_close(self, c: Connection, session: Session, msg_id: Id,
                       p: params.CloseParams) -> None:
        stream = self._client_stream(c, p.stream_id)
        if stream is not None:
            self._end_stream(stream, None, notify=False)
        self._respond(c.conn, msg_id, {})

    # -- the adapter's reports ------------------------------------------------------------------

    def _on_forward_connected(self, event: ForwardConnected) -> None:
        stream = self._forwards.get(event.stream)
        if stream is None:
            return
        open_id = stream.connected()
        window = {"bytes": WINDOW_BYTES, "chunks": WINDOW_CHUNKS}
        self._respond(stream.conn, open_id, {"streamId": stream.stream_id, "window": window})
        self._sync_forward(stream)

    def _on_forward_unrouted(self, event: ForwardUnrouted) -> None:
        stream = self._forwards.get(event.stream)
        if stream is None:
            return
        from . import _forward_params as params  # loaded by forward/open's parse

        host, port = stream.target
        refusal = None if stream.route == "session" else "forward refused: no route"
        refusal = refusal or params.host_route_refusal(
            event.network, self.config.forward_loopback, host, port, event.listening)
        if refusal is not None:
            self._end_stream(stream, RpcError(-32600, refusal, {"kind": "forwardRefused"}),
                             adapter_knows=False)
            return
        stream.rerouted("host")
        self._emit(OpenForward(stream=stream.stream, session_id=stream.session_id, host=host,
                               port=port, route="host"))

    def _on_forward_failed(self, event: ForwardFailed) -> None:
        stream = self._forwards.get(event.stream)
        if stream is None:
            return
        host, port = stream.target
        error = RpcError(INTERNAL_ERROR, f"forward to {_address(host, port)} failed: "
                         f"{event.error}", {"kind": "forwardFailed"})
        self._end_stream(stream, error, adapter_knows=False)

    def _on_forward_received(self, event: ForwardReceived) -> None:
        stream = self._forwards.get(event.stream)
        if stream is None:
            return
        seq = stream.received(len(event.data))
        data = b"%s%d,\"seq\":%d,\"dataBase64\":\"%s\"}}" % (
            _DATA, stream.stream_id, seq, binascii.b2a_base64(event.data, newline=False))
        self._emit(Send(conn=stream.conn, data=data))
        self._sync_forward(stream)

    def _on_forward_ended(self, event: ForwardEnded) -> None:
        stream = self._forwards.get(event.stream)
        if stream is None:
            return
        stream.ended()
        self._emit(Send(conn=stream.conn, data=encode_notification(
            "forward/eof", {"streamId": stream.stream_id, "seq": stream.seq})))
        self._maybe_done(stream)

    def _on_forward_written(self, event: ForwardWritten) -> None:
        stream = self._forwards.get(event.stream)
        if stream is None:
            return
        self._forward_total -= event.size
        for msg_id in stream.written(event.size):
            self._respond(stream.conn, msg_id, {})
        self._maybe_done(stream)

    # -- what follows ---------------------------------------------------------------------------

    def _sync_forward(self, stream: ForwardStream) -> None:
        c = self.core._conns.get(stream.conn)
        change = stream.pause_change(c is not None and c.blocked)
        if change is True:
            self._emit(PauseForward(stream=stream.stream))
        elif change is False:
            self._emit(ResumeForward(stream=stream.stream))

    def blocked(self, conn: int) -> None:
        """The connection's sending blocked or drained: pause or resume its streams."""
        for stream in list(self._forwards.values()):
            if stream.conn == conn:
                self._sync_forward(stream)

    def _maybe_done(self, stream: ForwardStream) -> None:
        if stream.done:
            self._end_stream(stream, None)

    def _forget_stream(self, stream: ForwardStream, tell_adapter: bool = True) -> list[Id]:
        """Close ``stream`` and forget its handle: the calls still waiting, to answer."""
        self._forward_total -= stream.backlog
        waiting = stream.close()
        del self._forwards[stream.stream]
        self._forward_ids.pop((stream.conn, stream.stream_id), None)
        if tell_adapter:
            self._emit(CloseForward(stream=stream.stream))
        return waiting

    def _end_stream(self, stream: ForwardStream, error: RpcError | None, notify: bool = True,
                    adapter_knows: bool = True) -> None:
        """Close ``stream``: the adapter told (unless it told us), the calls still waiting
        failed, the client told (unless it asked: ``notify``)."""
        connecting = stream.phase is Phase.CONNECTING
        waiting = self._forget_stream(stream, adapter_knows)
        if connecting:
            self._fail(stream.conn, waiting[0], error or invalid_request(
                f"forward to {_address(*stream.target)} was closed before it connected"))
            return
        closed = invalid_request(f"forward stream {stream.stream_id} is closed")
        for msg_id in waiting:
            self._fail(stream.conn, msg_id, closed)
        if notify:
            self._emit(Send(conn=stream.conn, data=encode_notification("forward/closed", {
                "streamId": stream.stream_id,
                "error": None if error is None else error.message})))

    def closed(self, conn: int) -> None:
        """The connection closed: its streams go, and nobody is told."""
        for stream in [s for s in self._forwards.values() if s.conn == conn]:
            self._forget_stream(stream)
        self._forward_next.pop(conn, None)

    def ended(self, session_id: str) -> None:
        """The session ended, and its network with it: the streams into it close."""
        for stream in [s for s in self._forwards.values() if s.session_id == session_id]:
            self._end_stream(stream, invalid_request(f"session {session_id} has ended"))

    def stopped(self) -> None:
        """The server stops: every stream goes (their connections are closing)."""
        for stream in list(self._forwards.values()):
            self._forget_stream(stream)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
