"""The managed network proxy's listeners: an HTTP proxy and a SOCKS5 one per process, served on
the `Loop` alone, so every adapter runs them the same way.

The room decides nothing. Before any connection leaves it resolves the name (`_lookups`), asks
the core through ``ask(proc, question_id, question)`` and acts on `ProxyRoom.answer`,
connecting (`_dial`) only to the addresses it resolved and asked about. `_room`: the
listeners, accepted under per-process and total caps; `_hub`: what every connection shares
(the `Limits`, the questions, the lookups, the count of buffered bytes, the open connections by
process); `_side` and `_relay`: one socket's bounded queue, and two of them moved both ways;
`_http_proxy` (with h11) and `_socks` (over `_socks_wire`, SOCKS5's bytes, sans-I/O) for the
clients; `_udp`: UDP ASSOCIATE; with transparent TCP, `_transparent` for the connections a
process's namespace redirects to the room and `_dns` (over `_dns_wire`, DNS's bytes, sans-I/O)
for the synthetic addresses that keep their names. It imports no other room, only the shared
`_loop`, `backends` (its `Refused`) and the core's `Question`.
"""


from __future__ import annotations

import socket
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from .._loop import Loop

if TYPE_CHECKING:
    from execproto.netproxy import Brokered

    from . import _room
    from ._hub import Limits, Refusal
    from ._question import Question
    from ._transparent import OriginalDestination

__all__ = ["Limits", "ProxyRoom", "Question"]


class ProxyRoom:
    """The room (`_room.ProxyRoom`), made at its first listener: most servers never launch a
    proxy, and the room's modules (h11 among them) are ~20 ms of a start. Until then there is
    nothing to close or answer. Code is imported late only from the server's own package,
    which no sandbox can write (`_command._own_files`)."""

    def __init__(self, loop: Loop, ask: Callable[[int, int, Question], None],
                 limits: Limits | None = None,
                 original_destination: OriginalDestination | None = None) -> None:
        self._made: _room.ProxyRoom | None = None
        self._make = (loop, ask, limits, original_destination)

    @property
    def _room(self) -> _room.ProxyRoom:
        if self._made is None:
            from . import _room

            loop, ask, limits, destination = self._make
            given: dict[str, Any] = {"limits": limits, "original_destination": destination}
            self._made = _room.ProxyRoom(loop, ask, **{name: value for name, value
                                                       in given.items() if value is not None})
        return self._made

    def listen(self, proc: int, http: socket.socket, socks: socket.socket | None,
               udp: bool, transparent: socket.socket | None = None,
               dns: socket.socket | None = None, owner: Hashable = None,
               credentials: tuple[Brokered, ...] = ()) -> None:
        self._room.listen(proc, http, socks, udp, transparent, dns, owner, credentials)

    def answer(self, question_id: int, allow: bool,
               refusal: Refusal | None, socks_code: int) -> None:
        if self._made is not None:  # else nothing was asked
            self._made.answer(question_id, allow, refusal, socks_code)

    def close(self, proc: int) -> None:
        if self._made is not None:
            self._made.close(proc)

    def close_all(self) -> None:
        if self._made is not None:
            self._made.close_all()

    @property
    def buffered(self) -> int:
        return self._room.buffered

    @property
    def peak_buffered(self) -> int:
        return self._room.peak_buffered

    def names(self, proc: int) -> int:
        return self._room.names(proc)

    def connections(self, proc: int | None = None) -> int:
        return self._room.connections(proc)

    @property
    def questions(self) -> int:
        return self._room.questions


def __getattr__(name: str) -> Any:
    """`Limits` and `Question` as the package's own names, imported when first asked for."""
    if name == "Limits":
        from ._hub import Limits

        return Limits
    if name == "Question":
        from ._question import Question

        return Question
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
