"""The watches behind ``fs/watchMissing``, by polling.

Every POLL_INTERVAL, while any watch is live, one blocking job on a worker thread looks at every
watched path. Polling rather than inotify: one code path for every adapter and file system, and
the work is bounded (the core allows 256 paths per watch, one watch per connection), at the cost
of up to one interval of delay. A missing path is watched through its first missing component
(for ``x/y/z`` with only ``x`` absent, ``x`` appearing fires), as an inotify watch on the deepest
existing directory would see it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execproto import FsCompleted, MissingChanged, Unwatch, WatchMissing

if TYPE_CHECKING:
    from ._driver import Loop

POLL_INTERVAL = 0.05  # seconds

# What fires a watch: (path, whether it exists now). Fires when one probe's answer changes.
Probe = tuple[str, bool]


def _first_missing(path: str) -> str:
    """The shallowest component of ``path`` that does not exist (``path`` itself at worst)."""
    here = path
    while True:
        parent = os.path.dirname(here)
        if parent == here or os.path.exists(parent):
            return here
        here = parent


def probes(missing: tuple[str, ...], present: str | None) -> list[Probe] | None:
    """What to poll, or None when the watch does not hold (a missing path exists, or the
    present one does not)."""
    if any(os.path.exists(path) for path in missing):
        return None
    if present is not None and not os.path.exists(present):
        return None
    found = [(_first_missing(path), False) for path in missing]
    if present is not None:
        found.append((present, True))
    return found


def _fired(watches: dict[int, list[Probe]]) -> list[int]:
    return [watch for watch, checks in watches.items()
            if any(os.path.exists(path) != existed for path, existed in checks)]


class Watches:
    """Runs `WatchMissing` and `Unwatch` for the driver; ``feed`` hands events to the core."""

    def __init__(self, loop: Loop, feed: Callable[[Any], None]) -> None:
        self._loop = loop
        self._feed = feed
        self._live: dict[int, list[Probe]] = {}
        self._checking: set[int] = set()  # first check running
        self._dropped: set[int] = set()  # unwatched while their first check ran
        self._polling = False

    def start(self, action: WatchMissing) -> None:
        def done(outcome: Any) -> None:
            if isinstance(outcome, BaseException):
                outcome = None  # unreadable as a whole: nothing to watch
            self._checking.discard(action.watch)
            self._feed(FsCompleted(op=action.op, result={"watching": outcome is not None}))
            if action.watch in self._dropped:
                self._dropped.discard(action.watch)
            elif outcome is not None:
                self._live[action.watch] = outcome
                self._schedule()

        self._checking.add(action.watch)
        self._loop.run_blocking(lambda: probes(action.missing, action.present), done)

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
