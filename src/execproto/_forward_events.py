"""The events of port forwarding (execproto's extension): what the adapter reports of the
streams an `OpenForward` asked for.

Few clients forward, so these classes are made at the first use of one of them, not at every
start: `execproto.events` finds each here when it is first asked for (PEP 562), and the core
loads its forwarding (`_forwards`) at the first ``forward/*`` call or forward event.
"""

from __future__ import annotations

from typing import Literal

import attrs

from .events import Event

__all__ = ["ForwardConnected", "ForwardEnded", "ForwardFailed", "ForwardReceived",
           "ForwardUnrouted", "ForwardWritten"]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ForwardConnected(Event):
    """The stream of an `OpenForward` is connected: its bytes may move."""

    stream: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ForwardUnrouted(Event):
    """The backend gave no socket in the session's network for an `OpenForward`: the
    session's sandboxes get no network of their own here (``network`` "none": the backend
    said so) or the backend cannot say (``network`` "unknown": it has no
    ``session_socket``). ``listening``: the TCP ports the server's own process listens on,
    which a stream on the host's loopback must never reach. Nothing is kept of the stream."""

    stream: int
    network: Literal["none", "unknown"]
    listening: tuple[int, ...] = ()


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ForwardFailed(Event):
    """The stream could not connect, or broke (``error``, the OS's words: "Connection refused
    (os error 111)"). It is closed and forgotten already."""

    stream: int
    error: str


@attrs.frozen(kw_only=True, repr=False, eq=False)
class ForwardReceived(Event):
    """Bytes the stream's target sent."""

    stream: int
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ForwardEnded(Event):
    """The stream's target sent EOF: no `ForwardReceived` follows."""

    stream: int


@attrs.frozen(kw_only=True, repr=False, eq=False)
class ForwardWritten(Event):
    """``size`` more bytes of the `WriteForward` actions reached the target's socket, in
    order, never more than was asked."""

    stream: int
    size: int
