"""A client gets its share of the fs threads and no more, and no answers past its high water.

One connection keeps sixty big walks in flight: it has at most `FS_PER_CONNECTION` of the
threads, so another client's fs calls are answered at once (on one FIFO pool they waited for
the walks, about a minute). A client that asks for large reads and reads none of the answers
gets no more of them made once its send buffer is past the high-water mark: the server's
memory holds a few, not all (90 unread 16 MiB reads took 2.1 GB before).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from .conftest import Server, uri
from .test_limits import rss_mib

WALK = {"maxDepth": 64, "maxDirectories": 10_000, "maxEntries": 50_000,
        "followDirectorySymlinks": False}
PROBE_LIMIT = 1.0


def test_one_connections_walks_take_only_its_share(adapter: str) -> None:
    server = Server(adapter, "--log-level", "warning")
    try:
        hog = server.client()
        for _ in range(60):
            hog.request("fs/walk", {"path": uri("/usr"), "options": WALK})
        time.sleep(0.2)  # its share of the threads busy, the rest of its walks queued
        other = server.client()
        worst = 0.0
        for _ in range(20):
            began = time.monotonic()
            assert "result" in other.call("fs/getMetadata", {"path": uri("/tmp")}, timeout=60)
            worst = max(worst, time.monotonic() - began)
        assert worst < PROBE_LIMIT, worst
        # And a walk of its own: walks have their own threads, one of them the hog's at most.
        began = time.monotonic()
        small = {**WALK, "maxEntries": 10}
        assert "result" in other.call("fs/walk", {"path": uri("/usr"), "options": small},
                                      timeout=60)
        assert time.monotonic() - began < PROBE_LIMIT
        hog.close()
    finally:
        log = server.stop()
    assert "Traceback" not in log, log


def test_answers_nobody_reads_are_not_made_past_the_high_water(adapter: str,
                                                                 tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"\x00" * (16 << 20))
    server = Server(adapter, "--log-level", "warning")
    try:
        reader = server.client()
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        baseline = rss_mib(server.process.pid)
        for _ in range(40):
            reader.request("fs/readFile", {"path": uri(big)})
        peak = baseline
        for _ in range(40):  # 4 s: long enough for every read to have run on the old pool
            time.sleep(0.1)
            peak = max(peak, rss_mib(server.process.pid))
        # A read's answer is ~22 MB of base64 plus its bytes: a share's worth is in flight.
        assert peak - baseline < 400, (baseline, peak)
        other = server.client()
        assert "result" in other.call("fs/getMetadata", {"path": uri(big)})
        reader.close()
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
