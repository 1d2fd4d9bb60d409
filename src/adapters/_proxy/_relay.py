"""Bytes both ways between two sides, each direction bounded.

What is read from one side and not yet written to the other never exceeds ``limit``: a side
reads at most the room left in the other's queue, and stops reading when there is none; the
other's drain starts it again. The end of either side (or a failure) ends both: what was
already read is written first, then ``done`` is called and the owner closes both.
"""

from __future__ import annotations

from collections.abc import Callable

from ._side import Side


class Relay:
    def __init__(self, a: Side, b: Side, limit: int, done: Callable[[], None]) -> None:
        self._limit = limit
        self._done = done
        self._ending = False
        for src, dst in ((a, b), (b, a)):
            src.budget = self._budget(dst)
            src.on_data = self._forward(src, dst)
            src.on_error = self._end
            dst.on_drained = self._resume(src, dst)
        a.read(True)
        b.read(True)

    def _budget(self, dst: Side) -> Callable[[], int]:
        return lambda: self._limit - dst.queued

    def _forward(self, src: Side, dst: Side) -> Callable[[bytes], None]:
        def forward(data: bytes) -> None:
            if not data:
                # Either side's end is both sides' end, once what it sent is delivered.
                self._ending = True
                src.read(False)
                dst.read(False)
                dst.finish(self._end)
                return
            dst.write(data)
            if dst.queued >= self._limit:
                src.read(False)

        return forward

    def _resume(self, src: Side, dst: Side) -> Callable[[], None]:
        def resume() -> None:
            if not self._ending and dst.queued < self._limit:
                src.read(True)

        return resume

    def _end(self) -> None:
        done, self._done = self._done, _nothing
        done()


def _nothing() -> None:
    pass
