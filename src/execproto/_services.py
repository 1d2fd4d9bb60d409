"""``environment/*``, ``fs/*`` and the executor's config: validated here, run by the adapter.

Each method has a parser (params -> request, raising the reference's errors) and a runner that
keeps the per-connection bookkeeping (open fs handles) and emits `RunFs`; the blocking work
comes back as `FsCompleted`. The calls the adapter works on, ``http/request``'s too
(`_http_service`, loaded at its first call), are kept here, so a closed connection's go with it.
"""

from __future__ import annotations

from typing import Any

import attrs

from . import _fs_params, _sandbox
from ._b64 import decode_or_raise
from ._errors import (
    NOT_FOUND,
    LocalProtocolError,
    RpcError,
    invalid_params,
    invalid_request,
)
from ._fields import Fields
from ._jsonrpc import Id
from ._paths import path_from_uri
from ._policy import Policy, narrow
from ._sandbox import SandboxRequest
from ._session import Connection, Session
from ._state import CoreState
from .actions import FsRequest, RunFs
from .events import FsCompleted

MAX_BLOCK = 1 << 20
MAX_HANDLE_ID_BYTES = 32  # the reference's limit, counted in UTF-8 bytes


def _uri(fields: Fields, name: str) -> str:
    return path_from_uri(fields.text(name))


def parse_fs(method: str, raw: Any) -> tuple[FsRequest, SandboxRequest | None]:
    """Validate the params of any ``fs/*`` method into the request the adapter runs, and the
    sandbox it asks for (resolved into a policy once the server's floor is known)."""
    f = Fields(raw, "FsParams")
    if method in ("fs/readFile", "fs/getMetadata", "fs/canonicalize", "fs/readDirectory"):
        params: dict[str, Any] = {"path": _uri(f, "path")}
    elif method == "fs/writeFile":
        params = {"path": _uri(f, "path")}
        params["data"] = decode_or_raise(
            f.text("dataBase64"),
            lambda why: invalid_request(f"fs/writeFile requires valid base64 dataBase64: {why}"),
        )
    elif method == "fs/createDirectory":
        params = {"path": _uri(f, "path"), "recursive": f.flag("recursive", True)}
    elif method == "fs/remove":
        params = {
            "path": _uri(f, "path"),
            "recursive": f.flag("recursive", True),
            "force": f.flag("force", True),
        }
    elif method == "fs/copy":
        params = {
            "source": _uri(f, "sourcePath"),
            "destination": _uri(f, "destinationPath"),
            "recursive": f.flag("recursive"),
        }
    elif method == "fs/walk":
        params = _fs_params.walk(f)
    elif method == "fs/open":
        params = {"handleId": f.ident("handleId"), "path": _uri(f, "path")}
        # Absent means "read"; an explicit null is an error, as in the reference.
        params["mode"] = _fs_params.open_mode(f.raw("mode")) if f.has("mode") else "read"
        if len(params["handleId"].encode("utf-8", "surrogatepass")) > MAX_HANDLE_ID_BYTES:
            raise invalid_request(f"file handle ID must not exceed {MAX_HANDLE_ID_BYTES} bytes")
    elif method == "fs/readBlock":
        params = {"handleId": f.ident("handleId"), "offset": f.uint("offset"), "len": f.uint("len")}
        if not 1 <= params["len"] <= MAX_BLOCK:
            raise invalid_request(f"file read block length must be between 1 and {MAX_BLOCK}")
    elif method == "fs/writeBlock":
        params = _fs_params.write_block(f)
    else:
        assert method == "fs/close"
        params = {"handleId": f.ident("handleId")}
    return FsRequest(method=method, params=params), _sandbox.parse(f.raw("sandbox"), for_fs=True)


def unknown_handle(handle_id: str) -> RpcError:
    return RpcError(NOT_FOUND, f"unknown file handle `{handle_id}`")


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

    # -- fs -------------------------------------------------------------------------------------

    def _fs_run(
        self,
        c: Connection,
        session: Session,
        msg_id: Id,
        parsed: tuple[FsRequest, SandboxRequest | None],
    ) -> None:
        request, asked = parsed
        if request.method == "capabilities/discoverV2":  # its sandbox is among its params
            params = dict(request.params)
            asked = params.pop("sandbox")
            request = attrs.evolve(request, params=params)
        request = attrs.evolve(request, sandbox=self._fs_policy(asked))
        if request.method == "capabilityRoots/discoverV1":  # each root under its own sandbox
            roots = tuple({**root, "sandbox": self._fs_policy(root["sandbox"])}
                          for root in request.params["roots"])
            request = attrs.evolve(request, params={**request.params, "roots": roots})
        handle_id = request.params.get("handleId")
        if request.method == "fs/walk":
            _fs_params.walk_limits(request.params)
        elif request.method == "fs/open":
            if handle_id in c.fs_handles:
                raise invalid_request(f"file handle `{handle_id}` already exists")
            if len(c.fs_handles) >= self.config.max_fs_handles:
                raise invalid_request(
                    f"too many open file handles: at most {self.config.max_fs_handles}"
                )
            self._check_descriptors(1)
            # Reserved now, so the limit counts opens in flight; released if the open fails.
            c.fs_handles.add(handle_id)
        elif request.method in ("fs/readBlock", "fs/writeBlock") and handle_id not in c.fs_handles:
            raise unknown_handle(handle_id)
        if request.method == "fs/writeBlock":
            _fs_params.write_range(request.params)
        elif request.method == "fs/close":
            if handle_id not in c.fs_handles:
                self._respond(c.conn, msg_id, {})  # closing twice is harmless, as in the reference
                return
            c.fs_handles.discard(handle_id)
        op = self._take_op()
        self._ops[op] = _Op(c.conn, msg_id, request)
        c.ops.add(op)
        self._emit(RunFs(op=op, conn=c.conn, request=request))

    def _fs_policy(self, asked: SandboxRequest | None) -> Policy | None:
        """What an fs call asking for ``asked`` may touch: the client's sandbox, narrowed by
        the operator's floor, secrets and protected paths."""
        if asked is not None and asked.dynamic and asked.cwd is None:
            raise invalid_params(
                "file system sandbox context with dynamic permissions requires cwd")
        cwd = asked.cwd if asked is not None else None
        asked_policy = _sandbox.policy(asked, cwd, self.host.env.get("TMPDIR"))
        return narrow(self.config.floor, asked_policy, self.config.secrets,
                      self.config.protected)

    def _on_fs_completed(self, event: FsCompleted) -> None:
        entry = self._take_entry(event.op)
        if entry is None:
            return
        if entry.request is None:
            raise LocalProtocolError(f"op {event.op} is an http request, not an fs call")
        if event.error is not None:
            if entry.request.method == "fs/open":
                self._conns[entry.conn].fs_handles.discard(entry.request.params["handleId"])
            self._fail(entry.conn, entry.id, event.error)
        else:
            self._respond(entry.conn, entry.id, event.result if event.result is not None else {})

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
