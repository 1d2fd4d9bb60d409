"""Blocking work from many owners on a few threads, each owner getting its share.

fs calls, http calls and sandbox preparation are blocking, and some are slow (a walk of a big
tree, a remote server that trickles its answer, 50,000 directory entries looked at for deny
patterns). On one FIFO pool, one client's 60 walks made everyone else wait a minute. Here each
owner (a connection, or a session) has its own queue; a free thread takes the next call of the
next owner in turn (round-robin), and an owner has at most ``per_owner`` calls running, so one
client can fill only its part of the pool while the others' calls go on.

An owner may be *held* (its connection's send buffer is above the high-water mark: answers
nobody reads would only pile up) and *dropped* (its connection closed: queued calls are
forgotten, never run). Threads are daemons, started as work comes, so a call between two
slices never keeps the process from exiting, and an embedding host that never calls gets none.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

Work = Callable[[], Any]
Done = Callable[[Any], None]


class Shares:
    """``post`` carries ``done(result or exception)`` back to the owner thread."""

    def __init__(self, post: Callable[[Callable[[], None]], None], workers: int, per_owner: int,
                 name: str) -> None:
        self._post = post
        self._workers = workers
        self._per_owner = per_owner
        self._name = name
        self._lock = threading.Condition()
        self._queues: dict[Hashable, deque[tuple[Work, Done]]] = {}  # in turn order
        self._running: Counter[Hashable] = Counter()
        self._held: set[Hashable] = set()
        self._queued = 0  # calls in the queues
        self._started = 0
        self._idle = 0
        self._closed = False

    def submit(self, owner: Hashable, work: Work, done: Done) -> None:
        with self._lock:
            self._queues.setdefault(owner, deque()).append((work, done))
            self._queued += 1
            # More calls waiting than threads waiting for them: one more thread, while there
            # may be (an idle thread that has not woken yet counts for one call only).
            if self._queued > self._idle and self._started < self._workers:
                self._started += 1
                threading.Thread(target=self._run, name=self._name, daemon=True).start()
            self._lock.notify()

    def hold(self, owner: Hashable) -> None:
        """Start no more of ``owner``'s calls until `release`."""
        with self._lock:
            self._held.add(owner)

    def release(self, owner: Hashable) -> None:
        with self._lock:
            self._held.discard(owner)
            self._lock.notify_all()

    def drop(self, owner: Hashable) -> None:
        """Forget ``owner``'s queued calls: they are not run, and their ``done`` never called."""
        with self._lock:
            self._queued -= len(self._queues.pop(owner, ()))
            self._held.discard(owner)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._queues.clear()
            self._queued = 0
            self._lock.notify_all()

    def _next(self) -> tuple[Hashable, Work, Done] | None:
        """The first owner in turn that may start a call; it goes to the back of the turn."""
        for owner in self._queues:
            if self._running[owner] < self._per_owner and owner not in self._held:
                queue = self._queues.pop(owner)
                work, done = queue.popleft()
                self._queued -= 1
                if queue:
                    self._queues[owner] = queue
                self._running[owner] += 1
                return owner, work, done
        return None

    def _delivered(self, owner: Hashable, done: Done, result: Any) -> None:
        try:
            done(result)
        finally:
            with self._lock:
                self._running[owner] -= 1
                if not self._running[owner]:
                    del self._running[owner]
                self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
                taken = None
                while not self._closed and (taken := self._next()) is None:
                    self._lock.wait()
                self._idle -= 1
                if taken is None:  # closed
                    self._started -= 1
                    return
            owner, work, done = taken
            try:
                result = work()
            except Exception as exc:  # a bug in the work: its `done` says so
                result = exc
            # The call's place in its owner's share is given back only once its answer has
            # reached the owner: until then another of its calls could start before the
            # answer is queued, seen past the high water and the owner held (under load, up
            # to twice the share's answers were made for a client that read none).
            self._post(partial(self._delivered, owner, done, result))
            # Not kept while waiting for the next: a walk's answer is 15 MB, and eight idle
            # threads each holding their last one kept 120 MB alive.
            del taken, work, done, result
