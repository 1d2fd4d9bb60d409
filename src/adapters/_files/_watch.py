"""The watches behind ``fs/watchMissing``, by polling.

Every POLL_INTERVAL, while any watch is live, one blocking job on a worker thread looks at every
watched path. Polling rather than inotify: one code path for every adapter and file system, and
the work is bounded (the core allows 256 paths per watch, one watch per connection), at the cost
of up to one interval of delay. A missing path is watched through its first missing component
(for ``x/y/z`` with only ``x`` absent, ``x`` appearing fires), as an inotify watch on the deepest
existing directory would see it.

Under ``--fs-root`` or an operator's sandbox, existence is what the call's `Scope` can see: a
path outside it is refused when the watch begins, and one that leads outside through a symlink
counts as missing, so a watch is no oracle for what exists where fs calls may not look.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execproto import FsCompleted, MissingChanged, Policy, RpcError, Unwatch, WatchMissing

from ._beneath import Scope

if TYPE_CHECKING:
    from .._loop import Loop

POLL_INTERVAL = 0.05  # seconds

# What fires a watch: (path, whether it exists now). Fires when one probe's answer changes.
Probe = tuple[str, bool]


def _first_missing(path: str, scope: Scope) -> str:
    """The shallowest component of ``path`` that does not exist (``path`` itself at worst)."""
    here = path
    while True:
        parent = os.path.dirname(here)
        if parent == here or scope.exists(parent):
            return here
        here = parent


def probes(missing: tuple[str, ...], present: str | None, scope: Scope) -> list[Probe] | None:
    """What to poll, or None when the watch does not hold (a missing path exists, or the
    present one does not). Raises RpcError for a path outside the scope."""
    if scope.confined:
        for path in (*missing, *([] if present is None else [present])):
            scope.check(path, os.path.normpath(path), "read")
    if any(scope.exists(path) for path in missing):
        return None
    if present is not None and not scope.exists(present):
        return None
    found = [(_first_missing(path, scope), False) for path in missing]
    if present is not None:
        found.append((present, True))
    return found


# A live watch: what it polls, and the scope its paths are looked at through.
Live = tuple[list[Probe], Scope]


def _fired(watches: dict[int, Live]) -> list[int]:
    return [watch for watch, (checks, scope) in watches.items()
            if any(scope.exists(path) != existed for path, existed in checks)]


class Watches:
    """Runs `WatchMissing` and `Unwatch` for the driver; ``feed`` hands events to the core."""

    def __init__(self, loop: Loop, feed: Callable[[Any], None],
                 scope: Callable[[Policy | None], Scope] = lambda policy: Scope()) -> None:
        self._loop = loop
        self._feed = feed
        self._scope = scope  # the Scope for a watch's sandbox (`Files.scope`)
        self._live: dict[int, Live] = {}
        self._checking: set[int] = set()  # first check running
        self._dropped: set[int] = set()  # unwatched while their first check ran
        self._polling = False

    def start(self, action: WatchMissing) -> None:
        scope = self._scope(action.sandbox)

        def done(outcome: Any) -> None:
            self._checking.discard(action.watch)
            if isinstance(outcome, RpcError):  # a path it may not look at
                self._dropped.discard(action.watch)
                self._feed(FsCompleted(op=action.op, error=outcome))
                return
            if isinstance(outcome, BaseException):
                outcome = None  # unreadable as a whole: nothing to watch
            self._feed(FsCompleted(op=action.op, result={"watching": outcome is not None}))
            if action.watch in self._dropped:
                self._dropped.discard(action.watch)
            elif outcome is not None:
                self._live[action.watch] = (outcome, scope)
                self._schedule()

        self._checking.add(action.watch)
        self._loop.run_blocking(lambda: probes(action.missing, action.present, scope), done)

    def stop(self, action: Unwatch) -> None:
        self._live.pop(action.watch, None)
        if action.watch in self._checking:
            self._dropped.add(action.watch)

    def _schedule(self) -> None:
        if not self._polling and self._live:
            self._polling = True
            self._loop.call_at(self._loop.now() + POLL_INTERVAL, self._poll)

    def _poll(self) -> None:
        snapshot = dict(self._live)

        def done(outcome: Any) -> None:
            self._polling = False
            if not isinstance(outcome, BaseException):
                for watch in outcome:
                    if self._live.pop(watch, None) is not None:  # once, and only if still live
                        self._feed(MissingChanged(watch=watch))
            self._schedule()

        self._loop.run_blocking(lambda: _fired(snapshot), done)
