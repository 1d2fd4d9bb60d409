"""Name lookups an http call can walk away from.

``getaddrinfo`` cannot be interrupted: a resolver that never answers holds its thread for the
resolver's own timeout, which may be many seconds. So each lookup runs on a thread of its own
while the call waits for it in slices, and a cancelled call lets go at once. The lookup it
abandons runs on to its end, so how many run at once is bounded (`LOOKUPS`): a client cannot
pile up threads by cancelling calls to a name that hangs.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

LOOKUPS = 8  # at once, abandoned ones included; more wait their turn (cancellably)

_running = threading.BoundedSemaphore(LOOKUPS)

Address = list[tuple[Any, ...]]


def resolve(host: str, port: int, wait: Callable[[threading.Event | threading.Semaphore], None],
            ) -> Address:
    """``getaddrinfo(host, port)`` for a stream socket. ``wait(x)`` blocks until ``x`` is set
    (an Event) or acquired (a Semaphore), raising if the call is cancelled or out of time
    meanwhile; the caller cuts it into slices."""
    if _literal(host):  # nothing to look up, so nothing to wait for
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    wait(_running)
    answer: dict[str, Any] = {}
    done = threading.Event()

    def look_up() -> None:
        try:
            answer["found"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            answer["failed"] = exc
        finally:
            _running.release()
            done.set()

    threading.Thread(target=look_up, name="execproto-lookup", daemon=True).start()
    wait(done)
    if "failed" in answer:
        raise answer["failed"]
    found: Address = answer["found"]
    return found


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def sliced(slice_seconds: float, limit: float, check: Callable[[], None],
           ) -> Callable[[threading.Event | threading.Semaphore], None]:
    """A ``wait`` for `resolve` that looks at ``check`` (which raises to stop) every
    ``slice_seconds`` until the monotonic time ``limit``, then raises TimeoutError."""

    def wait(what: threading.Event | threading.Semaphore) -> None:
        while True:
            left = limit - time.monotonic()
            if left <= 0:
                raise TimeoutError("name lookup timed out")
            step = min(slice_seconds, left)
            if what.wait(step) if isinstance(what, threading.Event) else what.acquire(timeout=step):
                return
            check()

    return wait
