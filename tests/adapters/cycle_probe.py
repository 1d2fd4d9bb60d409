"""Run one adapter's server in this process with the garbage collector off, connect and close
clients, and print how many connections' objects are still alive: with the collector off, any
left are held by a reference cycle (`test_cycles.py`).

    python cycle_probe.py ADAPTER REPO_ROOT CLIENTS
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable

gc.disable()
sys.path.insert(0, sys.argv[2])

from tests.adapters.wsclient import Client  # noqa: E402 - after the path is set

KEPT = ("WsPeer", "ServerSocket")  # a connection's peer and its websocket state


def server(adapter: str, ready: Callable[[str], None]) -> Callable[[], None]:
    if adapter == "asyncio":
        import asyncio

        from execproto.adapters import asyncio as adapted

        async def main() -> None:
            await adapted.serve("ws://127.0.0.1:0", ready=ready, stop=asyncio.Event())

        return lambda: asyncio.run(main())
    if adapter == "trio":
        import trio

        from execproto.adapters import trio as adapted_trio

        async def main_trio() -> None:
            await adapted_trio.serve("ws://127.0.0.1:0", ready=ready, stop=trio.Event())

        return lambda: trio.run(main_trio)
    from execproto.adapters import threaded

    return lambda: threaded.serve("ws://127.0.0.1:0", ready=ready, stop=threading.Event())


def kept() -> int:
    return sum(1 for thing in gc.get_objects() if type(thing).__name__ in KEPT)


def main() -> None:
    adapter, clients = sys.argv[1], int(sys.argv[3])
    found: list[str] = []
    ready = threading.Event()
    threading.Thread(target=server(adapter, lambda url: (found.append(url), ready.set())),
                     daemon=True).start()
    assert ready.wait(30), "the server never listened"
    for _ in range(clients):
        client = Client(found[0])
        assert "result" in client.handshake()
        assert client.result("environment/status") == {"status": "ready"}
        client.close()
    deadline = time.monotonic() + 20  # the server notices each close in its own time
    while kept() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(kept())


if __name__ == "__main__":
    main()
