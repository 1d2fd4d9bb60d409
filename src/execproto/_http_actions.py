"""The actions of ``http/request``: the requests the core asks the adapter to make, and to
abandon.

Made at their first use, as the http events are (see `_http_events`): `execproto.actions` finds
each here when it is first asked for.
"""

from __future__ import annotations

import attrs

from ._records import Record
from .actions import Action

__all__ = ["CancelHttp", "HttpRequest", "RunHttp"]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class HttpRequest(Record):
    """A validated ``http/request``: an http or https ``url`` and an HTTP ``method`` token.

    ``timeout_ms`` None: no timeout. ``stream_response``: the body comes as `HttpBodyReceived`
    events after `HttpResponded`, rather than in it.
    """

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    timeout_ms: int | None
    stream_response: bool
    follow_redirects: bool
    # Headers whose value goes on with a variable of the server's own environment (the
    # request's ``valueEnvVar``): (index into ``headers``, variable). The core has checked that
    # the variable is allowed, set and non-empty, and that the whole value is a valid header
    # value; the adapter reads it when it sends, so the secret is in no action or trace.
    env_values: tuple[tuple[int, str], ...] = ()


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class RunHttp(Action):
    """Perform an HTTP request; answer with `HttpResponded`, then (streaming) body events.
    ``conn`` is the connection it answers on: its share of the adapter's http threads."""

    op: int
    conn: int
    request: HttpRequest


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class CancelHttp(Action):
    """Abandon the request ``op``: its connection closed. Events for it that are still on their
    way are ignored."""

    op: int
