"""``http/request``: validated here, run by the adapter (`RunHttp`), its answer built from
the ``Http*`` events.

Few clients fetch through the executor: this module, and the classes of its events and actions,
are loaded at the first ``http/request`` or http event (`ServerCore._later`), not at every
start. The calls it keeps are the core's (`_services`' ops, shared with fs calls), so a closed
connection's calls go with it whichever they are.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import attrs

from ._b64 import decode
from ._errors import LocalProtocolError, internal_error, invalid_params, invalid_request
from ._fields import Fields, text, wrong_type
from ._http_actions import HttpRequest, RunHttp
from ._http_events import HttpBodyReceived, HttpFinished, HttpResponded
from ._jsonrpc import Id, encode_notification
from ._records import Record
from ._services import ServiceHandlers, _Op
from ._session import Connection, Session
from .actions import Send

# RFC 9110 token characters: what an HTTP method may be made of.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")

NO_NETWORK = ("http/request is refused: the operator's sandbox allows no network "
              "(the server runs with --sandbox and without --allow-network)")


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


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class HttpParams(Record):
    """``http/request``'s params, validated: the client's ``request_id`` (its streamed body's
    name), the ``request`` to make but for its headers, and the ``headers`` as asked, set on
    the request by `header_values`, which needs the server's environment."""

    request_id: str
    request: HttpRequest
    headers: tuple[Header, ...]


def parse_http(raw: Any) -> HttpParams:
    """Validate ``http/request`` params, in the reference's order (the first bad field is
    named)."""
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
    return HttpParams(request_id=request_id, request=request, headers=headers)


class HttpService:
    """The ``http/request`` calls of one core, made at its first need."""

    def __init__(self, core: ServiceHandlers) -> None:
        self.core = core
        # What it answers and emits goes into the actions of the core's call under way.
        self._emit = core._emit
        self._respond = core._respond
        self._fail = core._fail

    def event_handlers(self) -> dict[type, Callable[[Any], None]]:
        return {HttpResponded: self._responded, HttpBodyReceived: self._body,
                HttpFinished: self._finished}

    def run(self, c: Connection, session: Session, msg_id: Id, parsed: HttpParams) -> None:
        request_id = parsed.request_id
        headers, env_values = header_values(parsed.headers, self.core.host.env)
        request = attrs.evolve(parsed.request, headers=headers, env_values=env_values)
        # The call has no sandbox of its own (the reference's params carry none): the effective
        # policy is the operator's floor. Without network there, the server's own sockets must
        # not become the way out (the host's loopback included).
        floor = self.core.config.floor
        if floor is not None and not floor.network:
            raise invalid_request(NO_NETWORK)
        if request.stream_response and request_id in c.http_streams:
            raise invalid_params(f"http/request requestId `{request_id}` is already streaming")
        op = self.core._take_op()
        entry = _Op(c.conn, msg_id, None)
        entry.request_id = request_id
        entry.streaming = request.stream_response
        self.core._ops[op] = entry
        c.ops.add(op)
        if entry.streaming:
            c.http_streams[request_id] = op
        self._emit(RunHttp(op=op, conn=c.conn, request=request))

    def _entry(self, op: int) -> _Op | None:
        entry = self.core._ops.get(op)
        if entry is None:
            self.core._stale(op)
        elif entry.request is not None:
            raise LocalProtocolError(f"op {op} is an fs call, not an http request")
        return entry

    def _responded(self, event: HttpResponded) -> None:
        entry = self._entry(event.op)
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
            self.core._take_entry(event.op)

    def _body(self, event: HttpBodyReceived) -> None:
        entry = self._entry(event.op)
        if entry is None:
            return
        if not entry.streaming or not entry.answered:
            raise LocalProtocolError(f"http op {event.op}: body without a streamed response")
        self._body_delta(entry, event.data, done=False, error=None)

    def _finished(self, event: HttpFinished) -> None:
        entry = self._entry(event.op)
        if entry is None:
            return
        self.core._take_entry(event.op)
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
