"""A path a client names is never opened before it is seen to be a file.

Opening has effects of its own: a device's driver runs (a watchdog arms, a terminal becomes
the server's controlling one), a FIFO's other end wakes. A FIFO shows it without a device:
the test waits in a blocking open of one end, which returns only if the server opens the
other. Every fs call that reads or writes a named file is tried.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ADAPTERS, Server, uri
from .wsclient import Client


@pytest.fixture(scope="module", params=ADAPTERS)
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    server = Server(request.param)
    yield server.client()
    log = server.stop()
    assert "Traceback" not in log, log

# (method, params beside the path, the end the server would open: the test waits on the other)
CALLS = [
    ("fs/readFile", {}, os.O_WRONLY),
    ("fs/writeFile", {"dataBase64": "eA=="}, os.O_RDONLY),
    ("fs/open", {"handleId": "r"}, os.O_WRONLY),
    ("fs/open", {"handleId": "w", "mode": "replace"}, os.O_RDONLY),
    ("fs/copy", {"destinationPath": "COPY", "recursive": False}, os.O_WRONLY),
]


@pytest.mark.parametrize(("method", "extra", "other_end"), CALLS,
                         ids=[f"{c[0]}-{c[1].get('mode', '')}" for c in CALLS])
def test_a_fifo_is_refused_without_being_opened(client: Client, tmp_path: Path, method: str,
                                                extra: dict[str, str], other_end: int) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    woken = threading.Event()

    def wait_for_the_other_end() -> None:
        os.close(os.open(fifo, other_end))  # returns once someone opens the other end
        woken.set()

    waiter = threading.Thread(target=wait_for_the_other_end, daemon=True)
    waiter.start()
    path_key = "sourcePath" if method == "fs/copy" else "path"
    params = {path_key: uri(fifo),
              **{k: (uri(tmp_path / "copy") if v == "COPY" else v) for k, v in extra.items()}}
    answer = client.call(method, params, timeout=5)
    assert "error" in answer, answer
    assert not woken.wait(0.5), "the server opened the FIFO before it refused it"
    # Free the waiter: open the FIFO ourselves, both ends at once (never blocks on Linux).
    mine = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    assert woken.wait(5)
    os.close(mine)
    waiter.join(5)
