"""The `Loop`: what the owner of a core needs from an event loop, and all it may assume.

Each adapter implements it over its loop (asyncio's, trio's, or the threads adapter's own); the
driver and its rooms (`_children`, `_http_calls`, `_watch`, `_listen`) schedule through it and
nothing else. It sits below everything that schedules, so none of them imports another to
name it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Loop(Protocol):
    """What the driver needs from an event loop. Every callback runs on the owner."""

    def now(self) -> float: ...
    def watch_read(self, fd: int, callback: Callable[[], None]) -> None: ...
    def watch_write(self, fd: int, callback: Callable[[], None]) -> None: ...
    def unwatch_read(self, fd: int) -> None: ...
    def unwatch_write(self, fd: int) -> None: ...
    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` at ``when``; returns a function that cancels it."""
        ...
    def run_blocking(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        """Run ``work`` off the loop; call ``done(result or exception)`` back on the owner."""
        ...
    def post(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the owner soon. Safe from any thread."""
        ...
