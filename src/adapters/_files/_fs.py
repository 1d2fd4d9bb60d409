"""What the files room keeps across calls, shared by every adapter: the roots and the floor
every call is confined by, the open ``fs/open`` handles of every connection, and the
connections still there to read answers.

It is made with the driver, and kept as its connections come and go, so it holds only that:
the blocking work behind `RunFs` is `_calls`', imported at the first call (few clients use
files: a start skips it), from the server's own files, which every sandbox holds read-only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execproto import Policy, RpcError
    from execproto.fs import FsRequest

    from ._beneath import Scope

MAX_READ_FILE = 64 << 20  # fs/readFile answers in one message; bigger files go by fs/open


class Files:
    """Runs file requests (`run`); holds the open ``fs/open`` handles of every connection.

    ``roots``: ``--fs-root``; ``floor``: the operator's sandbox, which the call's policy is
    narrowed by again once its rules are resolved through symlinks (as for a process)."""

    def __init__(self, roots: Sequence[str] = (), floor: Policy | None = None) -> None:
        self.roots = [os.path.realpath(root) for root in roots]
        self.floor = floor
        self._lock = threading.Lock()
        self._handles: dict[tuple[int, str], tuple[int, str]] = {}  # (conn, id) -> (fd, path)
        # Connections still there to read answers: a call whose connection closed while it
        # waited is not run, a walk stops, and an open that finished after it closes its
        # descriptor instead of keeping it for nobody. None: all are (no driver's peers).
        self._live: set[int] | None = None

    def run(self, conn: int, request: FsRequest) -> tuple[Any, RpcError | None]:
        """(result, None) or (None, error), never raising for what the request did (see
        `_calls.run`)."""
        from . import _calls

        return _calls.run(self, conn, request)

    def scope(self, policy: Policy | None) -> Scope:
        """What a call with ``policy`` (the client's, narrowed by the floor) may touch."""
        from . import _calls

        return _calls.scope(self, policy)

    # -- connections ----------------------------------------------------------------------------

    def wanted(self, conn: int) -> bool:
        """Whether ``conn`` is still there to read an answer."""
        with self._lock:
            return self._live is None or conn in self._live

    def connections(self) -> list[int]:
        """The connections open now (none known: no driver's peers)."""
        with self._lock:
            return sorted(self._live or ())

    def open_connection(self, conn: int) -> None:
        with self._lock:
            if self._live is None:
                self._live = set()
            self._live.add(conn)

    def close_connection(self, conn: int) -> None:
        with self._lock:
            if self._live is not None:
                self._live.discard(conn)
            mine = [key for key in self._handles if key[0] == conn]
            fds = [self._handles.pop(key)[0] for key in mine]
        for fd in fds:
            os.close(fd)

    # -- handles --------------------------------------------------------------------------------

    def keep(self, conn: int, handle_id: str, fd: int, path: str) -> bool:
        """Keep ``fd`` as ``conn``'s ``handle_id``; False (and nothing kept) if ``conn`` is
        gone, so the caller closes it."""
        with self._lock:
            kept = self._live is None or conn in self._live
            if kept:
                self._handles[conn, handle_id] = (fd, path)
        return kept

    def handle(self, conn: int, handle_id: str) -> int | None:
        """The descriptor of ``conn``'s ``handle_id``, or None."""
        with self._lock:
            found = self._handles.get((conn, handle_id))
        return None if found is None else found[0]

    def forget(self, conn: int, handle_id: str) -> int | None:
        """``conn``'s ``handle_id`` no longer kept: its descriptor (the caller closes it)."""
        with self._lock:
            found = self._handles.pop((conn, handle_id), None)
        return None if found is None else found[0]
