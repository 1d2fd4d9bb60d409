"""Forwarded streams on the `Loop`: connect, read, write, close; nothing else.

The driver hands it `OpenForward`, `WriteForward`, `PauseForward`, `ResumeForward` and
`CloseForward`. A socket of the session's network comes from the backend's
``session_socket`` (it blocks the first time, making the network: off the owner); where the
backend says there is none (``NoNetwork``: no network of the session's own) or has no such
method, the room says so (`ForwardUnrouted`) and keeps nothing, and the core decides what
next; any other refusal (the session's network could not be made now) fails the stream.
Connecting
and the bytes are non-blocking on the owner: one read of at most READ_SIZE per readiness, so
many streams take turns, and none read while the core has it paused (its client's window is
full, or its connection blocked). What a stream's writes have taken is reported as it goes
(`ForwardWritten`); a failure closes it (`ForwardFailed`), after which nothing more of it is
reported.
"""

from __future__ import annotations

import errno
import os
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

from execproto.actions import CloseForward, OpenForward, PauseForward, ResumeForward, WriteForward
from execproto.events import (
    Event,
    ForwardConnected,
    ForwardEnded,
    ForwardFailed,
    ForwardReceived,
    ForwardUnrouted,
    ForwardWritten,
)

from .._loop import Loop
from ..backends import NoNetwork
from . import _ports

READ_SIZE = 64 << 10  # one read's bytes at most: a stream's turn
CONNECT_TIMEOUT = 10.0  # seconds a connect may take before it fails as timed out
# How `LocalBackend.session_socket` words a session network it failed to make, which is no
# answer to "has this session a network of its own?": the stream fails rather than fall back.


def _why(exc: BaseException) -> str:
    """An OS error as the reference words it: "Connection refused (os error 111)"."""
    if isinstance(exc, OSError) and exc.errno:
        return f"{os.strerror(exc.errno)} (os error {exc.errno})"
    return f"{type(exc).__name__}: {exc}"


class Target:
    """One stream's socket, from its making to its close."""

    __slots__ = ("stream", "sock", "fd", "open", "paused", "reading", "writing", "out",
                 "eof_asked", "read_done", "cancel_timer")

    def __init__(self, stream: int) -> None:
        self.stream = stream
        self.sock: socket.socket | None = None
        self.fd = -1
        self.open = False  # connected
        self.paused = False  # the core said not to read
        self.reading = self.writing = False  # watched on the loop
        self.out: deque[memoryview] = deque()  # what waits to be written
        self.eof_asked = False  # shut the sending side once `out` is written
        self.read_done = False  # the target's EOF was read
        self.cancel_timer: Callable[[], None] | None = None


class Forwards:
    def __init__(self, loop: Loop, feed: Callable[[Event], None], backend: Any) -> None:
        self.loop = loop
        self._feed = feed
        self._backend = backend
        self._targets: dict[int, Target] = {}
        self.run: dict[type, Callable[[Any], None]] = {
            OpenForward: self._open, WriteForward: self._write, PauseForward: self._pause,
            ResumeForward: self._resume, CloseForward: self._close,
        }

    # -- connecting -----------------------------------------------------------------------------

    def _open(self, action: OpenForward) -> None:
        target = self._targets[action.stream] = Target(action.stream)
        family = socket.AF_INET6 if ":" in action.host else socket.AF_INET
        backend = self._backend

        def make() -> Any:  # on a worker thread
            if action.route == "host":
                return socket.socket(family, socket.SOCK_STREAM)
            maker = getattr(backend, "session_socket", None)
            if maker is None:
                return ("unknown", ())
            try:
                return maker(action.session_id, family, socket.SOCK_STREAM)
            except NoNetwork:  # (any other refusal: it has one, but not now; no fallback)
                return ("none", _ports.listening())

        def made(result: Any) -> None:
            if self._targets.get(action.stream) is not target:  # closed meanwhile
                if isinstance(result, socket.socket):
                    result.close()
                return
            if isinstance(result, tuple):
                del self._targets[action.stream]
                self._feed(ForwardUnrouted(stream=action.stream, network=result[0],
                                           listening=result[1]))
            elif isinstance(result, BaseException):
                del self._targets[action.stream]
                self._feed(ForwardFailed(stream=action.stream, error=_why(result)))
            else:
                self._connect(target, result, (action.host, action.port))

        self.loop.run_blocking(make, made)

    def _connect(self, target: Target, sock: socket.socket, address: tuple[str, int]) -> None:
        target.sock, target.fd = sock, sock.fileno()
        sock.setblocking(False)
        code = sock.connect_ex(address)
        if code == 0:
            self._connected(target)
        elif code == errno.EINPROGRESS:
            target.writing = True
            self.loop.watch_write(target.fd, lambda: self._connect_done(target))
            target.cancel_timer = self.loop.call_at(
                self.loop.now() + CONNECT_TIMEOUT,
                lambda: self._fail(target, OSError(errno.ETIMEDOUT, "timed out")))
        else:
            self._fail(target, OSError(code, os.strerror(code)))

    def _connect_done(self, target: Target) -> None:
        assert target.sock is not None
        self.loop.unwatch_write(target.fd)
        target.writing = False
        code = target.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._fail(target, OSError(code, os.strerror(code)))
        else:
            self._connected(target)

    def _connected(self, target: Target) -> None:
        if target.cancel_timer is not None:
            target.cancel_timer()
            target.cancel_timer = None
        target.open = True
        try:
            target.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # type: ignore[union-attr]
        except OSError:
            pass
        self._feed(ForwardConnected(stream=target.stream))
        if self._targets.get(target.stream) is target:
            self._watch_reads(target)
            self._flush(target)

    # -- bytes ----------------------------------------------------------------------------------

    def _watch_reads(self, target: Target) -> None:
        want = target.open and not target.paused and not target.read_done
        if want and not target.reading:
            target.reading = True
            self.loop.watch_read(target.fd, lambda: self._readable(target))
        elif not want and target.reading:
            target.reading = False
            self.loop.unwatch_read(target.fd)

    def _readable(self, target: Target) -> None:
        if self._targets.get(target.stream) is not target or target.sock is None:
            return
        try:
            data = target.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fail(target, exc)
            return
        if data:
            self._feed(ForwardReceived(stream=target.stream, data=data))
            return
        target.read_done = True
        self._watch_reads(target)
        self._feed(ForwardEnded(stream=target.stream))

    def _write(self, action: WriteForward) -> None:
        target = self._targets.get(action.stream)
        if target is None:
            return
        if action.data:
            target.out.append(memoryview(action.data))
        target.eof_asked = target.eof_asked or action.eof
        if target.open:
            self._flush(target)

    def _flush(self, target: Target) -> None:
        sock = target.sock
        assert sock is not None
        taken = 0
        try:
            while target.out:
                head = target.out[0]
                sent = sock.send(head)
                taken += sent
                if sent < len(head):
                    target.out[0] = head[sent:]
                    break
                target.out.popleft()
            if not target.out and target.eof_asked:
                target.eof_asked = False
                sock.shutdown(socket.SHUT_WR)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            if taken:
                self._feed(ForwardWritten(stream=target.stream, size=taken))
            self._fail(target, exc)
            return
        want = bool(target.out)
        if want and not target.writing:
            target.writing = True
            self.loop.watch_write(target.fd, lambda: self._flush_again(target))
        elif not want and target.writing:
            target.writing = False
            self.loop.unwatch_write(target.fd)
        if taken:
            self._feed(ForwardWritten(stream=target.stream, size=taken))

    def _flush_again(self, target: Target) -> None:
        if self._targets.get(target.stream) is target:
            self._flush(target)

    def _pause(self, action: PauseForward) -> None:
        target = self._targets.get(action.stream)
        if target is not None:
            target.paused = True
            self._watch_reads(target)

    def _resume(self, action: ResumeForward) -> None:
        target = self._targets.get(action.stream)
        if target is not None:
            target.paused = False
            self._watch_reads(target)

    # -- the end --------------------------------------------------------------------------------

    def _fail(self, target: Target, exc: BaseException) -> None:
        if self._targets.get(target.stream) is not target:
            return
        self._forget(target)
        self._feed(ForwardFailed(stream=target.stream, error=_why(exc)))

    def _close(self, action: CloseForward) -> None:
        target = self._targets.get(action.stream)
        if target is not None:
            self._forget(target)

    def _forget(self, target: Target) -> None:
        del self._targets[target.stream]
        if target.cancel_timer is not None:
            target.cancel_timer()
            target.cancel_timer = None
        if target.reading:
            self.loop.unwatch_read(target.fd)
        if target.writing:
            self.loop.unwatch_write(target.fd)
        target.reading = target.writing = False
        target.out.clear()
        if target.sock is not None:
            target.sock.close()

    def close_all(self) -> None:
        """The stop, or the core's failure: every stream's socket is closed."""
        for target in list(self._targets.values()):
            self._forget(target)

    def __len__(self) -> int:
        return len(self._targets)
