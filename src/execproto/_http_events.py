"""The events of ``http/request``: what the adapter reports of the requests a `RunHttp`
asked for.

Few clients fetch through the executor, so these classes are made at the first use of one of
them, not at every start: `execproto.events` finds each here when it is first asked for (PEP
562), and the core loads its http calls (`_http_service`) at the first ``http/request`` or
http event.
"""

from __future__ import annotations

import attrs

from .events import Event

__all__ = ["HttpBodyReceived", "HttpFinished", "HttpResponded"]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class HttpResponded(Event):
    """An ``http/request`` got its status and headers (and, unless streaming, its body)."""

    op: int
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""


@attrs.frozen(kw_only=True, repr=False, eq=False)
class HttpBodyReceived(Event):
    """A piece of a streamed response body, after `HttpResponded` and before `HttpFinished`."""

    op: int
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class HttpFinished(Event):
    """The request is over: the streamed body ended, or the request failed (``error``)."""

    op: int
    error: str | None = None
