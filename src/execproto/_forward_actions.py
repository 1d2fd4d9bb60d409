"""The actions of port forwarding (execproto's extension): the streams the core asks the
adapter to open, feed, pause and close.

Made at their first use, as the forward events are (see `_forward_events`): `execproto.actions`
finds each here when it is first asked for.
"""

from __future__ import annotations

from typing import Literal

import attrs

from .actions import Action

__all__ = ["CloseForward", "ForwardRoute", "OpenForward", "PauseForward", "ResumeForward",
           "WriteForward"]

# The networks a forwarded stream may be connected in (see `OpenForward`).
ForwardRoute = Literal["session", "host"]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class OpenForward(Action):
    """Connect a TCP stream to ``host`` (an IP address) and ``port``: with ``route`` "session",
    from a socket made in session ``session_id``'s network (the backend's ``session_socket``),
    or with "host", in the server host's own network (only its loopback, which the core
    checked). Answer with `ForwardConnected`, or `ForwardFailed`; where the backend has no
    network for the session, `ForwardUnrouted` (and nothing is kept of ``stream``)."""

    stream: int
    session_id: str
    host: str
    port: int
    route: ForwardRoute = "session"


@attrs.frozen(kw_only=True, repr=False, eq=False)
class WriteForward(Action):
    """Write ``data`` to the stream's target, in order, reporting `ForwardWritten` as it is
    taken; then, with ``eof``, shut down the stream's sending side."""

    stream: int
    data: bytes
    eof: bool = False


@attrs.frozen(kw_only=True, repr=False, eq=False)
class PauseForward(Action):
    """Stop reading the stream's target (its client has a window's worth to take)."""

    stream: int


@attrs.frozen(kw_only=True, repr=False, eq=False)
class ResumeForward(Action):
    """Read the stream's target again, after a `PauseForward`."""

    stream: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class CloseForward(Action):
    """Close the stream (connecting or not) and forget it: nothing more is reported of it."""

    stream: int
