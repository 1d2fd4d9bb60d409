"""Each adapter's `Loop` keeps a descriptor's two watches apart: ending or re-arming one never
ends the other.

A proxied connection's socket is watched both ways at once (the client's requests read, the
origin's answer written), and its owner stops and starts each way on its own; a watch lost on
the way is a connection that stalls for good, with nothing to say why. Each test reaches the
state it checks through the loop's own thread, with nothing timed but the bound on the wait.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from .proxy_loops import ADAPTERS, LoopThread, start


class Watched:
    """One end of a socket pair, watched on ``runner``'s loop; the other end, ``peer``, is
    the test's. Each watch is one-shot: its callback sets an event and unwatches itself."""

    def __init__(self, runner: LoopThread) -> None:
        self.runner = runner
        self.sock, self.peer = socket.socketpair()
        self.sock.setblocking(False)
        self.peer.setblocking(False)
        self.fd = self.sock.fileno()

    def watch(self, way: str) -> threading.Event:
        fired = threading.Event()
        loop = self.runner.loop
        unwatch = loop.unwatch_read if way == "read" else loop.unwatch_write

        def once() -> None:
            fired.set()
            unwatch(self.fd)

        watch = loop.watch_read if way == "read" else loop.watch_write
        self.on_loop(lambda: watch(self.fd, once))
        return fired

    def unwatch(self, way: str) -> None:
        loop = self.runner.loop
        unwatch = loop.unwatch_read if way == "read" else loop.unwatch_write
        self.on_loop(lambda: unwatch(self.fd))

    def on_loop(self, call: Callable[[], None]) -> None:
        self.runner.call(call)

    def settle(self) -> None:
        """Let every watch the loop has started begin to wait: a few round trips through it."""
        for _ in range(5):
            self.runner.call(lambda: None)

    def fill(self) -> None:
        """Send until the kernel takes no more: not writable until the peer reads."""
        for _ in range(100_000):
            try:
                self.sock.send(b"x" * 65536)
            except BlockingIOError:
                return
        raise AssertionError("the send buffer never filled")

    def drain_peer(self) -> None:
        for _ in range(100_000):
            try:
                if not self.peer.recv(1 << 20):
                    return
            except BlockingIOError:
                return

    def close(self) -> None:
        self.unwatch("read")  # never close a descriptor the loop still waits on
        self.unwatch("write")
        self.sock.close()
        self.peer.close()


@pytest.fixture(params=ADAPTERS)
def watched(request: pytest.FixtureRequest) -> Iterator[Watched]:
    runner = start(request.param)
    pair = Watched(runner)
    yield pair
    pair.close()
    runner.stop()


def test_unwatching_the_read_leaves_the_write_watched(watched: Watched) -> None:
    watched.fill()
    writable = watched.watch("write")
    watched.watch("read")  # nothing comes: it waits beside the write
    watched.settle()
    watched.unwatch("read")
    watched.settle()
    watched.drain_peer()  # room in the send buffer again
    assert writable.wait(5), "the write watch went with the read's"


def test_unwatching_the_write_leaves_the_read_watched(watched: Watched) -> None:
    watched.fill()  # not writable, so the write watch waits too
    readable = watched.watch("read")
    watched.watch("write")
    watched.settle()
    watched.unwatch("write")
    watched.settle()
    watched.peer.send(b"ping")
    assert readable.wait(5), "the read watch went with the write's"


def test_a_read_paused_and_resumed_beside_a_waiting_write(watched: Watched) -> None:
    """The relay's pattern: the reader stopped and started again and again while the same
    socket waits to be written; then its end, the read unwatched for good."""
    watched.fill()
    writable = watched.watch("write")
    for _ in range(3):
        watched.watch("read")
        watched.settle()
        watched.unwatch("read")
    readable = watched.watch("read")
    watched.settle()
    watched.peer.send(b"ping")
    assert readable.wait(5), "the read watched again never fired"
    watched.watch("read")
    watched.settle()
    watched.unwatch("read")  # the end: the write still has a queue to deliver
    watched.drain_peer()
    assert writable.wait(5), "the write watch was lost on the way"


def test_a_descriptor_closed_as_it_is_unwatched_can_be_watched_again_under_its_number(
        watched: Watched) -> None:
    """Unwatch and close in one go, on the loop, while the watch waits: the number, reused at
    once, is watched afresh, and the loop outlives the closed descriptor."""
    watched.watch("read")
    watched.watch("write")  # a socket pair's end is writable: this one fires and is gone
    watched.settle()
    fd = watched.fd

    def unwatch_and_close() -> None:
        watched.runner.loop.unwatch_read(fd)
        watched.runner.loop.unwatch_write(fd)
        mine, other = socket.socketpair()
        # Close the old socket and give its number to a new one in one step (other threads
        # of the run may open and close descriptors too, so the lowest free is not ``fd``).
        watched.sock.detach()
        os.dup2(mine.fileno(), fd)
        mine.close()
        watched.sock = socket.socket(fileno=fd)
        watched.sock.setblocking(False)
        watched.peer.close()
        watched.peer = other

    watched.on_loop(unwatch_and_close)
    watched.settle()
    readable = watched.watch("read")
    watched.settle()
    watched.peer.send(b"ping")
    assert readable.wait(5), "the reused number was never watched"
