"""``--listen stdio`` with a reader of stdout that stops: requests wait, memory does not grow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from .test_limits import rss_mib

READS = 3000


def line(msg_id: int | None, method: str, params: object) -> bytes:
    message: dict[str, object] = {"jsonrpc": "2.0", "method": method, "params": params}
    if msg_id is not None:
        message["id"] = msg_id
    return json.dumps(message).encode() + b"\n"


def test_a_stdout_nobody_reads_holds_requests_back(adapter: str) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "stdio",
         "--adapter", adapter, "--kill-grace", "0.5"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(line(1, "initialize", {"clientName": "tests"}))
        server.stdin.write(line(None, "initialized", {}))
        server.stdin.write(line(2, "process/start", {
            "processId": "big", "argv": ["head", "-c", str(1 << 20), "/dev/zero"],
            "cwd": "file:///tmp", "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            "tty": False}))
        server.stdin.flush()
        while b'"process/closed"' not in server.stdout.readline():
            pass
        baseline = rss_mib(server.pid)
        requests = b"".join(line(10 + i, "process/read", {"processId": "big"})
                            for i in range(READS))

        def flood() -> None:
            try:
                assert server.stdin is not None
                server.stdin.write(requests)  # blocks once the server stops reading: it should
                server.stdin.flush()
            except (OSError, ValueError):
                pass

        threading.Thread(target=flood, daemon=True).start()
        peak = baseline
        for _ in range(10):
            time.sleep(0.3)
            peak = max(peak, rss_mib(server.pid))
        assert peak < baseline + 150, (baseline, peak)
        # The requests held back are answered once the answers are read (the first hundred).
        answered = 0
        for reply in server.stdout:
            if b'"result"' in reply and b'"chunks"' in reply:
                answered += 1
                if answered == 100:
                    break
        assert answered == 100
    finally:
        server.kill()
        server.wait()
