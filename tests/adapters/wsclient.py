"""A blocking websocket client for the end-to-end tests: JSON-RPC calls and notifications.

Loopback only. Messages that are not the awaited response are kept, in order, in `inbox`.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)


class Closed(Exception):
    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"connection closed: {code} {reason}")
        self.code = code


class Client:
    def __init__(self, url: str, headers: list[tuple[str, str]] | None = None, timeout: float = 10,
                 tls: ssl.SSLContext | None = None):
        """``tls``: the client's context, for a ``wss://`` url."""
        parts = urlsplit(url)
        assert parts.hostname in ("127.0.0.1", "::1"), "tests talk to loopback only"
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=parts.hostname)
        self.ws = WSConnection(ConnectionType.CLIENT)
        extra = [(k.encode(), v.encode()) for k, v in (headers or [])]
        self.sock.sendall(self.ws.send(Request(host="127.0.0.1", target="/", extra_headers=extra)))
        self.inbox: list[dict[str, Any]] = []
        self._ids = 0
        self._parts: list[Any] = []
        self.closed: Closed | None = None
        self.rejected: int | None = None
        self.session_id = ""
        self._pending: list[Any] = []
        self.pings = 0
        while True:
            event = self._next_event(timeout)
            if isinstance(event, AcceptConnection):
                break
            if isinstance(event, RejectConnection):
                self.rejected = event.status_code
                return

    # -- frames ---------------------------------------------------------------------------------

    def _next_event(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while not self._pending:
            self._pending.extend(self.ws.events())
            if self._pending:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no message in time")
            self.sock.settimeout(remaining)
            data = self.sock.recv(1 << 20)
            self.ws.receive_data(data or None)
            if not data and not self._pending:
                self._pending.extend(self.ws.events())
                if not self._pending:
                    raise Closed(None, "eof")
        return self._pending.pop(0)

    def recv_raw(self, timeout: float = 10) -> str | bytes:
        deadline = time.monotonic() + timeout  # pings answered on the way do not extend it
        while True:
            event = self._next_event(max(0.0, deadline - time.monotonic()))
            if isinstance(event, Message):
                self._parts.append(event.data)
                if event.message_finished:
                    parts, self._parts = self._parts, []
                    return parts[0] if len(parts) == 1 else type(parts[0])().join(parts)
            elif isinstance(event, Ping):
                self.pings += 1
                self.sock.sendall(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                self.closed = Closed(event.code, event.reason)
                try:
                    self.sock.sendall(self.ws.send(event.response()))
                except Exception:
                    pass
                raise self.closed
            elif isinstance(event, RejectData):
                continue

    def recv(self, timeout: float = 10) -> dict[str, Any]:
        return json.loads(self.recv_raw(timeout))

    def send_raw(self, data: str | bytes) -> None:
        event = TextMessage(data=data) if isinstance(data, str) else BytesMessage(data=data)
        self.sock.sendall(self.ws.send(event))

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message))

    def close(self) -> None:
        try:
            self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        except Exception:
            pass
        self.sock.close()

    # -- JSON-RPC -------------------------------------------------------------------------------

    def request(self, method: str, params: Any = None) -> int:
        self._ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._ids, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self._ids

    def response(self, msg_id: int, timeout: float = 10) -> dict[str, Any]:
        for index, message in enumerate(self.inbox):
            if message.get("id") == msg_id and "method" not in message:
                return self.inbox.pop(index)
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.01, deadline - time.monotonic()))
            if message.get("id") == msg_id and "method" not in message:
                return message
            self.inbox.append(message)

    def call(self, method: str, params: Any = None, timeout: float = 10) -> dict[str, Any]:
        return self.response(self.request(method, params), timeout)

    def result(self, method: str, params: Any = None, timeout: float = 10) -> Any:
        reply = self.call(method, params, timeout)
        assert "result" in reply, reply
        return reply["result"]

    def handshake(self, resume: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"clientName": "tests"}
        if resume is not None:
            params["resumeSessionId"] = resume
        reply = self.call("initialize", params)
        if "result" in reply:
            self.session_id = reply["result"]["sessionId"]
            self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return reply

    def notification(self, predicate: Any, timeout: float = 10) -> dict[str, Any]:
        """The first notification (kept or new) for which ``predicate`` holds; it is removed."""
        for index, message in enumerate(self.inbox):
            if "method" in message and predicate(message):
                return self.inbox.pop(index)
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.01, deadline - time.monotonic()))
            if "method" in message and predicate(message):
                return message
            self.inbox.append(message)

    def events_until_closed(self, process_id: str, timeout: float = 20) -> list[dict[str, Any]]:
        """Every notification of ``process_id`` up to and including its process/closed."""
        events = []
        while True:
            n = self.notification(lambda m: m["params"].get("processId") == process_id, timeout)
            events.append(n)
            if n["method"] == "process/closed":
                return events


def output_of(events: list[dict[str, Any]]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for n in events:
        if n["method"] == "process/output":
            stream = n["params"]["stream"]
            out[stream] = out.get(stream, b"") + base64.b64decode(n["params"]["chunk"])
    return out
