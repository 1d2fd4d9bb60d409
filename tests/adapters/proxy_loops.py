"""A bare `Loop` of each adapter, run on a thread of its own, for rooms tested without a server.

`LoopThread.call(fn)` runs ``fn`` on the loop's owner and returns what it returned (or raises
what it raised), so a test drives a room from its own thread the way the driver would from the
owner's. `watches()` counts the descriptors the loop is watching, through each loop's own
bookkeeping.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import trio

from execproto.adapters import asyncio as asyncio_adapter
from execproto.adapters import threaded as threaded_adapter
from execproto.adapters import trio as trio_adapter

ADAPTERS = ["asyncio", "trio", "threads"]


class LoopThread:
    loop: Any

    def call(self, fn: Callable[[], Any], timeout: float = 10) -> Any:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller's thread
                done.set_exception(exc)

        self.loop.post(run)
        return done.result(timeout)

    def watches(self) -> int:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class AsyncioThread(LoopThread):
    def __init__(self) -> None:
        self._aloop = asyncio.new_event_loop()
        self.loop = asyncio_adapter._Loop(self._aloop)
        self._thread = threading.Thread(target=self._aloop.run_forever, daemon=True)
        self._thread.start()

    def watches(self) -> int:
        return self.call(lambda: len(self._aloop._selector.get_map()))  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._aloop.call_soon_threadsafe(self._aloop.stop)
        self._thread.join(10)
        self._aloop.close()


class TrioThread(LoopThread):
    def __init__(self) -> None:
        ready: queue.Queue[Any] = queue.Queue()

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                stop = trio.Event()
                ready.put((trio_adapter._Loop(nursery), stop))
                await stop.wait()
                nursery.cancel_scope.cancel()

        self._thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self._thread.start()
        self.loop, self._stop = ready.get(timeout=10)

    def watches(self) -> int:
        return self.call(lambda: len(self.loop._readers) + len(self.loop._writers))

    def stop(self) -> None:
        self.loop.post(self._stop.set)
        self._thread.join(10)


class ThreadsThread(LoopThread):
    def __init__(self) -> None:
        self.loop = threaded_adapter._Loop()
        self._stopped = False
        self._thread = threading.Thread(target=self.loop.run_until, args=(lambda: self._stopped,),
                                        daemon=True)
        self._thread.start()

    def watches(self) -> int:
        return self.call(lambda: len(self.loop._watches))

    def stop(self) -> None:
        def end() -> None:
            self._stopped = True

        self.loop.post(end)
        self._thread.join(10)
        self.loop.close()


def wait_for(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    """``check()``'s first true value, polled, or its last one after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def start(adapter: str) -> LoopThread:
    kinds: dict[str, type[LoopThread]] = {
        "asyncio": AsyncioThread, "trio": TrioThread, "threads": ThreadsThread}
    return kinds[adapter]()
