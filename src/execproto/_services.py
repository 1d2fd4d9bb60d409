"""``environment/info``, ``fs/*`` and ``http/request``: validated here, run by the adapter.

The core checks every parameter and keeps the per-connection bookkeeping (open fs handles, live
response streams); the blocking work comes back as `FsCompleted` and the ``Http*`` events.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ._actions import CancelHttp, FsRequest, HttpRequest, RunFs, RunHttp, Send
from ._errors import NOT_FOUND, LocalProtocolError, RpcError, internal_error, invalid_params
from ._events import FsCompleted, HttpBodyReceived, HttpFinished, HttpResponded
from ._jsonrpc import Id, encode_notification
from ._params import Fields, nonempty_id
from ._session import Connection, Session
from ._state import CoreState

MAX_BLOCK = 1 << 20


def _path(f: Fields) -> dict[str, Any]:
    return {"path": f.uri("path")}


def _write_file(f: Fields) -> dict[str, Any]:
    return {"path": f.uri("path"), "data": f.base64("dataBase64")}


def _create_directory(f: Fields) -> dict[str, Any]:
    return {"path": f.uri("path"), "recursive": f.flag("recursive", True)}


def _remove(f: Fields) -> dict[str, Any]:
    return {
        "path": f.uri("path"),
        "recursive": f.flag("recursive", True),
        "force": f.flag("force", True),
    }


def _copy(f: Fields) -> dict[str, Any]:
    return {
        "source": f.uri("sourcePath"),
        "destination": f.uri("destinationPath"),
        "recursive": f.flag("recursive", False),
    }


def _read_block(f: Fields) -> dict[str, Any]:
    length = f.uint("len")
    if not 1 <= length <= MAX_BLOCK:
        raise invalid_params(f"invalid params: `len` must be between 1 and {MAX_BLOCK}")
    return {"handleId": f.text("handleId"), "offset": f.uint("offset"), "len": length}


# Methods whose params need nothing from the connection: method -> params parser.
_FS_PARSERS: dict[str, Callable[[Fields], dict[str, Any]]] = {
    "fs/readFile": _path,
    "fs/writeFile": _write_file,
    "fs/createDirectory": _create_directory,
    "fs/getMetadata": _path,
    "fs/canonicalize": _path,
    "fs/readDirectory": _path,
    "fs/remove": _remove,
    "fs/copy": _copy,
    "fs/readBlock": _read_block,
}


def unknown_handle(handle_id: str) -> RpcError:
    return RpcError(NOT_FOUND, f"unknown fs handle {handle_id}")


class _Op:
    """A call the adapter is working on, and where its answer goes."""

    __slots__ = ("conn", "id", "method", "params", "request_id", "streaming", "seq")

    def __init__(self, conn: int, msg_id: Id, method: str, params: dict[str, Any]) -> None:
        self.conn = conn
        self.id: Id | None = msg_id  # None once answered
        self.method = method
        self.params = params
        self.request_id = ""
        self.streaming = False  # an http response whose body comes as notifications
        self.seq = 0


class ServiceHandlers(CoreState):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ops: dict[int, _Op] = {}

    def _environment_info(self, c: Connection, session: Session, msg_id: Id, raw: Any) -> None:
        self._respond(c.conn, msg_id, self.host.environment_info)

    def _fs_call(self, c: Connection, session: Session, msg_id: Id, raw: Any, method: str) -> None:
        fields = Fields(raw)
        params = _FS_PARSERS[method](fields)
        if method == "fs/readBlock" and params["handleId"] not in c.fs_handles:
            raise unknown_handle(params["handleId"])
        self._run_fs(c, msg_id, method, params)

    def _fs_open(self, c: Connection, session: Session, msg_id: Id, raw: Any) -> None:
        fields = Fields(raw)
        handle_id = nonempty_id(fields, "handleId")
        if len(handle_id.encode("utf-8", "surrogatepass")) > self.config.max_handle_id_bytes:
            raise invalid_params(
                f"invalid params: `handleId` must be at most {self.config.max_handle_id_bytes} bytes"
            )
        path = fields.uri("path")
        if handle_id in c.fs_handles:
            raise invalid_params(f"invalid params: fs handle {handle_id} is already open")
        if len(c.fs_handles) >= self.config.max_fs_handles:
            raise invalid_params(
                f"invalid params: at most {self.config.max_fs_handles} fs handles may be open"
            )
        # Reserved now, so the limit counts opens still in flight; released if the open fails.
        c.fs_handles.add(handle_id)
        self._run_fs(c, msg_id, "fs/open", {"handleId": handle_id, "path": path})

    def _fs_close(self, c: Connection, session: Session, msg_id: Id, raw: Any) -> None:
        handle_id = Fields(raw).text("handleId")
        if handle_id not in c.fs_handles:
            raise unknown_handle(handle_id)
        c.fs_handles.discard(handle_id)
        self._run_fs(c, msg_id, "fs/close", {"handleId": handle_id})

    def _run_fs(self, c: Connection, msg_id: Id, method: str, params: dict[str, Any]) -> None:
        op = self._take_op()
        self._ops[op] = _Op(c.conn, msg_id, method, params)
        c.ops.add(op)
        self._emit(RunFs(op=op, conn=c.conn, request=FsRequest(method=method, params=params)))

    def _on_fs_completed(self, event: FsCompleted) -> None:
        entry = self._take_entry(event.op)
        if entry is None:
            return
        if event.error is not None:
            if entry.method == "fs/open":
                self._conns[entry.conn].fs_handles.discard(entry.params["handleId"])
            self._fail(entry.conn, entry.id, event.error)
        else:
            self._respond(entry.conn, entry.id, event.result if event.result is not None else {})

    # -- http -----------------------------------------------------------------------------------

    def _http_request(self, c: Connection, session: Session, msg_id: Id, raw: Any) -> None:
        f = Fields(raw)
        request_id = nonempty_id(f, "requestId")
        url = f.text("url")
        if urlsplit(url).scheme.lower() not in ("http", "https") or not urlsplit(url).netloc:
            raise invalid_params(f"invalid params: `url` must be an http or https URL, got {url!r}")
        policy = f.opt_text("redirectPolicy") or "follow"
        if policy not in ("follow", "stop"):
            raise invalid_params("invalid params: `redirectPolicy` must be follow or stop")
        stream = f.flag("streamResponse", False)
        if stream and request_id in c.http_streams:
            raise invalid_params(f"invalid params: http request {request_id} is already streaming")
        request = HttpRequest(
            method=f.text("method").upper(),
            url=url,
            headers=_headers(f.raw("headers")),
            body=f.base64("bodyBase64", required=False),
            timeout_ms=f.opt_uint("timeoutMs"),
            stream_response=stream,
            follow_redirects=policy == "follow",
        )
        op = self._take_op()
        entry = _Op(c.conn, msg_id, "http/request", {})
        entry.request_id = request_id
        entry.streaming = stream
        self._ops[op] = entry
        c.ops.add(op)
        if stream:
            c.http_streams[request_id] = op
        self._emit(RunHttp(op=op, request=request))

    def _on_http_responded(self, event: HttpResponded) -> None:
        entry = self._ops.get(event.op)
        if entry is None:
            return self._stale(event.op)
        result: dict[str, Any] = {
            "status": event.status,
            "headers": [{"name": name, "value": value} for name, value in event.headers],
            "bodyBase64": base64.b64encode(event.body).decode("ascii"),
        }
        self._respond(entry.conn, entry.id, result)
        entry.id = None  # answered; only body events remain
        if not entry.streaming:
            self._take_entry(event.op)

    def _on_http_body(self, event: HttpBodyReceived) -> None:
        entry = self._ops.get(event.op)
        if entry is None:
            return self._stale(event.op)
        if not entry.streaming or entry.id is not None:
            raise LocalProtocolError(f"http op {event.op}: body without a streamed response")
        self._body_delta(entry, event.data, done=False, error=None)

    def _on_http_finished(self, event: HttpFinished) -> None:
        entry = self._take_entry(event.op)
        if entry is None:
            return
        if entry.id is not None:
            self._fail(entry.conn, entry.id, internal_error(f"http/request failed: {event.error}"))
        else:
            self._body_delta(entry, b"", done=True, error=event.error)

    def _body_delta(self, entry: _Op, data: bytes, *, done: bool, error: str | None) -> None:
        entry.seq += 1
        params = {
            "requestId": entry.request_id,
            "seq": entry.seq,
            "deltaBase64": base64.b64encode(data).decode("ascii"),
            "done": done,
            "error": error,
        }
        self._emit(Send(conn=entry.conn, data=encode_notification("http/request/bodyDelta", params)))

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
            if entry.method == "http/request":
                self._emit(CancelHttp(op=op))
        c.ops.clear()
        c.http_streams.clear()


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid_params("invalid params: `headers` must be an array of {name, value}")
    out = []
    for item in value:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("value"), str)
        ):
            raise invalid_params("invalid params: `headers` must be an array of {name, value}")
        out.append((item["name"], item["value"]))
    return tuple(out)
