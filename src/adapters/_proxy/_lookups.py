"""Name lookups for the proxy, off the loop, bounded and shared fairly.

``getaddrinfo`` cannot be interrupted, so a lookup that outlives ``lookup_timeout`` is
answered with no addresses (the core decides what an unresolved name means) and its thread is
left to finish; it keeps its slot until then, so a resolver that hangs cannot pile up threads.
At most ``lookups`` run at once, at most ``lookups_per_process`` of one owner's (the room
keys them by session), and the waiting ones start in turn, one owner after another: a process
that floods names delays only its own session.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

import attrs

from .._loop import Loop

Found = Callable[[tuple[str, ...]], None]

HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_.-]{0,252})")  # lower-cased, as a client sent it


def literal(host: str) -> str | None:
    """``host`` as an IP address's text, if it is one."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def valid_host(host: str) -> bool:
    return literal(host) is not None or HOST_NAME.fullmatch(host) is not None


def _look_up(host: str, port: int) -> tuple[str, ...]:
    found: list[str] = []
    for *_, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        ip = str(address[0])
        if ip not in found:
            found.append(ip)
    return tuple(found)


@attrs.define(eq=False)
class Job:
    proc: Hashable  # its owner's key: a session, or a process
    host: str
    port: int
    found: Found | None  # None once answered or cancelled
    cancel_timer: Callable[[], None] = lambda: None


class Lookups:
    def __init__(self, loop: Loop, total: int, per_process: int, timeout: float) -> None:
        self._loop = loop
        self._total = total
        self._per_process = per_process
        self._timeout = timeout
        self._waiting: OrderedDict[Hashable, deque[Job]] = OrderedDict()  # by process, in turn
        self._running: dict[Hashable, int] = {}  # by process, abandoned ones included
        self.running = 0

    def resolve(self, proc: Hashable, host: str, port: int, found: Found) -> Callable[[], None]:
        """Look ``host`` up; ``found(addresses)`` on the owner. Returns a cancel."""
        ip = literal(host)
        if ip is not None:
            found((ip,))
            return lambda: None
        job = Job(proc, host, port, found)
        job.cancel_timer = self._loop.call_at(self._loop.now() + self._timeout,
                                              lambda: self._answer(job, ()))
        self._waiting.setdefault(proc, deque()).append(job)
        self._start()
        return lambda: self._cancel(job)

    def _cancel(self, job: Job) -> None:
        job.found = None
        job.cancel_timer()
        queue = self._waiting.get(job.proc)
        if queue is not None and job in queue:
            queue.remove(job)
            if not queue:
                del self._waiting[job.proc]

    def _answer(self, job: Job, addresses: tuple[str, ...]) -> None:
        found, job.found = job.found, None
        job.cancel_timer()
        if found is not None:
            self._cancel(job)  # out of the queue, if it never started
            found(addresses)

    def _start(self) -> None:
        while self.running < self._total:
            job = self._next()
            if job is None:
                return
            self.running += 1
            self._running[job.proc] = self._running.get(job.proc, 0) + 1
            self._loop.run_blocking(partial(_look_up, job.host, job.port),
                                    partial(self._done, job))

    def _next(self) -> Job | None:
        for proc in list(self._waiting):
            if self._running.get(proc, 0) >= self._per_process:
                continue
            queue = self._waiting.pop(proc)
            job = queue.popleft()
            if queue:
                self._waiting[proc] = queue  # to the back: the next process goes first
            return job
        return None

    def _done(self, job: Job, result: Any) -> None:
        self.running -= 1
        left = self._running[job.proc] - 1
        if left:
            self._running[job.proc] = left
        else:
            del self._running[job.proc]
        self._answer(job, result if isinstance(result, tuple) else ())
        self._start()
