"""A client that hangs up with fs/open calls still queued leaves no descriptor behind.

The connection's share of the fs pool is kept busy with large reads, so its opens wait behind
them and the hang-up comes while they wait or run; before, each one kept its descriptor for a
connection nobody would close (1,016 after ten rounds), until `process/start` failed for
everyone with "Too many open files". Bounded: five rounds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .conftest import STARVED, Server, eventually, uri

ROUNDS, OPENS = 5, 100
WALK = {"maxDepth": 64, "maxDirectories": 10_000, "maxEntries": 5_000,
        "followDirectorySymlinks": False}


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_queued_opens_of_a_client_that_hung_up_are_closed(adapter: str, tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("contents\n")
    big = tmp_path / "big"
    big.write_bytes(b"\0" * (16 << 20))
    server = Server(adapter)
    try:
        warm = server.client()
        assert "result" in warm.call("fs/open", {"handleId": "w", "path": uri(target)})
        warm.close()
        time.sleep(0.5)
        baseline = _descriptors(server.process.pid)
        for round_ in range(ROUNDS):
            client = server.client()
            for _ in range(4):  # the connection's fs threads busy while the opens queue up
                client.request("fs/readFile", {"path": uri(big)})
            for number in range(OPENS):
                client.request("fs/open", {"handleId": f"h{round_}-{number}",
                                           "path": uri(target)})
            client.close()
        assert eventually(lambda: _descriptors(server.process.pid) <= baseline + 4, wait=30), (
            baseline, _descriptors(server.process.pid))
        # And the server still serves.
        probe = server.client()
        assert "result" in probe.call("fs/getMetadata", {"path": uri(target)})
    finally:
        log = server.stop()
    assert "Traceback" not in log, log


def test_queued_calls_of_a_client_that_hung_up_do_not_delay_another(adapter: str) -> None:
    """Sixty walks queued by a client that then left made another client's fs/getMetadata
    wait about a minute here: the walks no longer run once their connection is gone."""
    server = Server(adapter, "--log-level", "warning")
    try:
        leaving = server.client()
        for _ in range(60):
            leaving.request("fs/walk", {"path": uri("/usr"), "options": {
                **WALK, "maxEntries": 50_000}})
        leaving.close()
        time.sleep(0.1)
        began = time.monotonic()
        probe = server.client()
        assert "result" in probe.call("fs/getMetadata", {"path": uri("/tmp")}, timeout=60)
        assert time.monotonic() - began < STARVED
    finally:
        server.stop()
