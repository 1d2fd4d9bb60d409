"""``environment/*``, ``fs/*``, the executor's config and ``http/request``: validated here, run
by the adapter.

Each method has a parser (params -> request, raising the reference's errors) and a runner that
keeps the per-connection bookkeeping (open fs handles, live response streams) and emits `RunFs`
or `RunHttp`. The blocking work comes back as `FsCompleted` and the ``Http*`` events.
"""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import urlsplit

import attrs

from . import _fs_params, _sandbox
from ._b64 import decode, decode_or_raise
from ._errors import (
    NOT_FOUND,
    LocalProtocolError,
    RpcError,
    internal_error,
    invalid_params,
    invalid_request,
)
from ._fields import Fields, text, wrong_type
from ._jsonrpc import Id, encode_notification
from ._paths import path_from_uri
from ._policy import Policy, narrow
from ._sandbox import SandboxRequest
from ._session import Connection, Session
from ._state import CoreState
from .actions import CancelHttp, FsRequest, HttpRequest, RunFs, RunHttp, Send
from .events import FsCompleted, HttpBodyReceived, HttpFinished, HttpResponded

MAX_BLOCK = 1 << 20
MAX_HANDLE_ID_BYTES = 32  # the reference's limit, counted in UTF-8 bytes
# RFC 9110 token characters: what an HTTP method may be made of.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


NO_NETWORK = ("http/request is refused: the operator's sandbox allows no network "
              "(the server runs with --sandbox and without --allow-network)")


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


def _redirect(value: Any) -> str:
    if isinstance(value, dict) and len(value) == 1:
        (value,) = value
    if not isinstance(value, str):
        raise wrong_type(value, "string or map")
    if value not in ("follow", "stop"):
        raise invalid_params(f"unknown variant `{value}`, expected `follow` or `stop`")
    return value


# A header: its name, its value as sent, and the server's variable its value goes on with.
Header = tuple[str, str, str | None]


def _headers(value: Any) -> tuple[Header, ...]:
    if not isinstance(value, list):
        raise wrong_type(value, "a sequence")
    out = []
    for item in value:
        header = Fields(item, "HttpHeader")
        out.append((header.text("name"), header.text("value"),
                    header.optional("valueEnvVar", text)))
    return tuple(out)


# Variables no header may take its value from, whatever the server's environment holds: the
# server's own credentials (model keys, cloud identities), as the reference (0.171.0, probed)
# refuses them. Compared case-insensitively.
HEADER_ENV_DENYLIST = frozenset(name.lower() for name in (
    "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN", "OPENAI_FEDERATION_RULE_ID",
    "OPENAI_IDENTITY_TOKEN_FILE", "OPENAI_WORKLOAD_IDENTITY_CONTEXT", "OPENAI_API_KEY",
    "CODEX_API_KEY", "CODEX_ACCESS_TOKEN", "CODEX_CONNECTORS_TOKEN",
    "CODEX_GUARDIAN_DECISIONS_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
))
# What a header value may hold, as the reference's HTTP library has it: visible ASCII, space,
# tab and any non-ASCII character; no other control character. Written as what it may not
# hold: a class up to U+10FFFF takes milliseconds to compile, at every start.
_NOT_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def header_values(headers: tuple[Header, ...], env: dict[str, str]
                  ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[int, str], ...]]:
    """The headers to send, and which of them go on with a variable of ``env`` (the server's
    own environment); each header checked in order as the reference checks it: the name, then
    the variable (allowed, set, non-empty), then the whole value."""
    sent, env_values = [], []
    for index, (name, value, variable) in enumerate(headers):
        if not _TOKEN.fullmatch(name):
            raise invalid_params("http/request header name is invalid: invalid HTTP header name")
        whole = value
        if variable is not None:
            if variable.lower() in HEADER_ENV_DENYLIST:
                raise invalid_params(f"http/request header {name} cannot use executor "
                                     f"environment variable {variable}")
            found = env.get(variable)
            if found is None:
                raise invalid_params(f"http/request header {name} requires executor "
                                     f"environment variable {variable}")
            if not found:
                raise invalid_params(f"http/request header {name} requires a non-empty "
                                     f"executor environment variable {variable}")
            whole += found
            env_values.append((index, variable))
        if _NOT_IN_VALUE.search(whole):
            raise invalid_params(f"http/request header value is invalid for {name}: "
                                 "failed to parse header value")
        sent.append((name, value))
    return tuple(sent), tuple(env_values)


def parse_http(raw: Any) -> tuple[str, HttpRequest, tuple[Header, ...]]:
    """Validate ``http/request`` params into (requestId, request, headers as asked). The
    request's headers are set by `header_values`, which needs the server's environment."""
    f = Fields(raw, "HttpRequestParams")
    method = f.text("method")
    url = f.text("url")
    request_id = f.ident("requestId")
    headers = f.optional("headers", _headers) or ()
    body = f.optional("bodyBase64", lambda value: decode(text(value)))
    timeout_ms = f.opt_uint("timeoutMs")
    redirect = f.optional("redirectPolicy", _redirect) or "follow"
    stream = f.flag("streamResponse", False)
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:  # e.g. an unbalanced "[" in the host
        raise invalid_params(f"http/request url is invalid: {exc}") from None
    if not parts.scheme:
        raise invalid_params("http/request url is invalid: relative URL without a base")
    if parts.scheme.lower() not in ("http", "https") or not hostname:
        raise invalid_params(f"http/request url is invalid: unsupported URL `{url}`")
    if not _TOKEN.fullmatch(method):
        raise invalid_params("http/request method is invalid: invalid HTTP method")
    request = HttpRequest(
        method=method,
        url=url,
        headers=(),
        body=body,
        timeout_ms=timeout_ms,
        stream_response=stream,
        follow_redirects=redirect == "follow",
    )
    return request_id, request, headers


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

    # -- http -----------------------------------------------------------------------------------

    def _http_run(
        self, c: Connection, session: Session, msg_id: Id,
        parsed: tuple[str, HttpRequest, tuple[Header, ...]]
    ) -> None:
        request_id, request, asked = parsed
        headers, env_values = header_values(asked, self.host.env)
        request = attrs.evolve(request, headers=headers, env_values=env_values)
        # The call has no sandbox of its own (the reference's params carry none): the effective
        # policy is the operator's floor. Without network there, the server's own sockets must
        # not become the way out (the host's loopback included).
        if self.config.floor is not None and not self.config.floor.network:
            raise invalid_request(NO_NETWORK)
        if request.stream_response and request_id in c.http_streams:
            raise invalid_params(f"http/request requestId `{request_id}` is already streaming")
        op = self._take_op()
        entry = _Op(c.conn, msg_id, None)
        entry.request_id = request_id
        entry.streaming = request.stream_response
        self._ops[op] = entry
        c.ops.add(op)
        if entry.streaming:
            c.http_streams[request_id] = op
        self._emit(RunHttp(op=op, conn=c.conn, request=request))

    def _http_entry(self, op: int) -> _Op | None:
        entry = self._ops.get(op)
        if entry is None:
            self._stale(op)
        elif entry.request is not None:
            raise LocalProtocolError(f"op {op} is an fs call, not an http request")
        return entry

    def _on_http_responded(self, event: HttpResponded) -> None:
        entry = self._http_entry(event.op)
        if entry is None:
            return
        if entry.answered:
            raise LocalProtocolError(f"http op {event.op} responded twice")
        result: dict[str, Any] = {
            "status": event.status,
            "headers": [{"name": name, "value": value} for name, value in event.headers],
            "bodyBase64": base64.b64encode(event.body).decode("ascii"),
        }
        self._respond(entry.conn, entry.id, result)
        entry.answered = True  # only body events remain
        if not entry.streaming:
            self._take_entry(event.op)

    def _on_http_body(self, event: HttpBodyReceived) -> None:
        entry = self._http_entry(event.op)
        if entry is None:
            return
        if not entry.streaming or not entry.answered:
            raise LocalProtocolError(f"http op {event.op}: body without a streamed response")
        self._body_delta(entry, event.data, done=False, error=None)

    def _on_http_finished(self, event: HttpFinished) -> None:
        entry = self._http_entry(event.op)
        if entry is None:
            return
        self._take_entry(event.op)
        if not entry.answered:
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
        notification = encode_notification("http/request/bodyDelta", params)
        self._emit(Send(conn=entry.conn, data=notification))

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
            if entry.request is None:
                self._emit(CancelHttp(op=op))
        c.ops.clear()
        c.http_streams.clear()
