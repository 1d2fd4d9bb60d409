"""The rooms few servers use, made at their first action: the file calls, ``http/request``'s
calls and the forwarded streams. Until a client asks, none of their modules is imported, nor
the core's classes of their actions made, so a server's start pays for none of it.

The driver carries out each action through the room its kind names (`Driver._run`); an action
of a kind it has no room for yet is handed here, and the room made for it joins that table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execproto import Action, Event

from .._loop import Loop

if TYPE_CHECKING:
    from .._files._fs_calls import FsCalls
    from .._forward._streams import Forwards
    from .._http._http_calls import HttpCalls

# Each room, by its name: its module and class, and the names of the actions it carries out
# (names: their classes are made at their first use, see `execproto.actions`). Imported late,
# from the server's own package, which every sandbox holds read-only (`_command._own_files`).
LATER: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "files": ("execproto.adapters._files._fs_calls", "FsCalls",
              ("RunFs", "WatchMissing", "Unwatch")),
    "http": ("execproto.adapters._http._http_calls", "HttpCalls", ("RunHttp", "CancelHttp")),
    "forwards": ("execproto.adapters._forward._streams", "Forwards",
                 ("OpenForward", "WriteForward", "PauseForward", "ResumeForward",
                  "CloseForward")),
}
_ROOM_OF = {kind: name for name, (_, _, kinds) in LATER.items() for kind in kinds}
# The actions someone waits on, whose room answers for one that raised (its ``raised``).
_ANSWERED = ("RunFs", "RunHttp")


class LaterRooms:
    """A driver's `LATER` rooms, each made with the loop, ``feed`` and what it needs besides
    (``files``: the driver's `Files` and the connections' `stuck`; ``http``: their `stuck`;
    ``forwards``: the backend)."""

    def __init__(self, loop: Loop, feed: Callable[[Event], None],
                 needs: dict[str, tuple[Any, ...]]) -> None:
        self._loop = loop
        self._feed = feed
        self._needs = needs
        self._made: dict[str, Any] = {}

    def run_of(self, action: Action) -> dict[type, Callable[[Any], None]] | None:
        """The table of the room that carries out ``action`` (made now if it was not yet), or
        None where no room here does."""
        name = _ROOM_OF.get(type(action).__name__)
        if name is None:
            return None
        run: dict[type, Callable[[Any], None]] = self.room(name).run
        return run

    def raised_of(self, action: Action) -> Callable[[Any, str], None] | None:
        """What answers for ``action`` having raised, where someone waits on it."""
        if type(action).__name__ not in _ANSWERED:
            return None
        raised: Callable[[Any, str], None] = self.room(_ROOM_OF[type(action).__name__]).raised
        return raised

    def room(self, name: str) -> Any:
        """The room ``name``, made now if it was not yet."""
        room = self._made.get(name)
        if room is None:
            module, kind, _ = LATER[name]
            made = getattr(importlib.import_module(module), kind)
            room = self._made[name] = made(self._loop, self._feed, *self._needs[name])
        return room

    @property
    def files(self) -> FsCalls | None:
        """The files room, if a file call made it."""
        return self._made.get("files")

    @property
    def http(self) -> HttpCalls | None:
        """``http/request``'s room, if a call made it."""
        return self._made.get("http")

    @property
    def forwards(self) -> Forwards | None:
        """The forwarded streams' room, if a ``forward/open`` made it."""
        return self._made.get("forwards")
