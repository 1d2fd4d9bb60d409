"""The fs room: ``fs/*`` calls (and the executor's own file reads) on worker threads.

The driver hands it `RunFs`; each call runs `Files.run` on a pool thread and is answered with
`FsCompleted` on the owner. A connection whose send buffer is past its high water starts no
new call (`hold`), as answers nobody reads would only pile up in memory; one that is gone has
its queued calls dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from execproto import INTERNAL_ERROR, Event, FsCompleted, RpcError, RunFs

from .._loop import Loop
from .._shares import Shares
from ._fs import Files

log = logging.getLogger("execproto")

# The pools' shares (`_shares`): 8 threads, at most 4 of a connection's calls at once; walks
# apart, fewer at once: each builds an answer of up to 50,000 entries, and how many run
# together is how much memory the allocator keeps afterwards.
FS_WORKERS, FS_PER_CONNECTION = 8, 4
WALK_WORKERS = 2  # fs/walk: two at once, one of a connection's


class FsCalls:
    def __init__(self, loop: Loop, feed: Callable[[Event], None], files: Files) -> None:
        self._feed = feed
        self.files = files
        self._pool = Shares(loop.post, FS_WORKERS, FS_PER_CONNECTION, "execproto-fs")
        self._walks = Shares(loop.post, WALK_WORKERS, 1, "execproto-walk")
        self.run: dict[type, Callable[[Any], None]] = {RunFs: self._run}

    def _run(self, action: RunFs) -> None:
        def done(outcome: Any) -> None:
            if isinstance(outcome, BaseException):  # a bug in the fs code: say so, keep serving
                log.error("%s failed", action.request.method, exc_info=outcome)
                failed = f"{action.request.method} failed: {outcome}"
                outcome = (None, RpcError(INTERNAL_ERROR, failed))
            result, error = outcome
            self._feed(FsCompleted(op=action.op, result=result, error=error))

        pool = self._walks if action.request.method == "fs/walk" else self._pool
        pool.submit(action.conn, partial(self.files.run, action.conn, action.request), done)

    def raised(self, action: RunFs, why: str) -> None:
        """Carrying out ``action`` raised: the call still gets its answer."""
        self._feed(FsCompleted(op=action.op, error=RpcError(INTERNAL_ERROR, f"failed: {why}")))

    def hold(self, conn: int) -> None:
        self._pool.hold(conn)
        self._walks.hold(conn)

    def release(self, conn: int) -> None:
        self._pool.release(conn)
        self._walks.release(conn)

    def drop(self, conn: int) -> None:
        self._pool.drop(conn)
        self._walks.drop(conn)

    def close(self) -> None:
        self._pool.close()
        self._walks.close()
