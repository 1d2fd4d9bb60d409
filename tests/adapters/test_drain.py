"""A graceful stop: SIGTERM drains (``--drain-grace``), a second signal stops at once.

While draining, /readyz says 503 and /livez 200, a new upgrade is refused with 503, a start
is refused, and the connections there are go on until the last process closes, so its late
output is read; then the server exits 0.
"""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request

import pytest

from .conftest import Server
from .wsclient import Client, Closed

START = {"cwd": "file:///tmp", "env": {}, "tty": False}


def status(server: Server, path: str) -> int:
    url = server.url.replace("ws://", "http://") + path
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def read_all(client: Client, process_id: str, wait: float = 20) -> tuple[bytes, dict]:
    import base64

    out, seq = b"", 0
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:  # bounded
        result = client.call("process/read", {"processId": process_id, "afterSeq": seq,
                                              "waitMs": 1000})["result"]
        out += b"".join(base64.b64decode(c["chunk"]) for c in result["chunks"])
        seq = result["nextSeq"] - 1
        if result["closed"]:
            return out, result
    raise AssertionError(f"{process_id} did not close in {wait} s")


def test_a_drain_lets_the_running_process_finish_and_its_output_be_read(adapter: str) -> None:
    server = Server(adapter, "--drain-grace", "30")
    client = server.client()
    script = "read line; echo late: $line"
    assert "result" in client.call("process/start", {"processId": "job",
                                                     "argv": ["sh", "-c", script],
                                                     "pipeStdin": True, **START})
    began = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while status(server, "/readyz") != 503 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert status(server, "/readyz") == 503
    assert status(server, "/livez") == 200
    assert Client(server.url).rejected == 503  # no new connection
    refused = client.call("process/start", {"processId": "new", "argv": ["true"], **START})
    assert "draining" in refused["error"]["message"]
    written = client.call("process/write", {"processId": "job", "chunk": "b2sK",  # "ok\n"
                                            "writeId": "w1"})
    assert written["result"]["status"] == "accepted", written
    out, result = read_all(client, "job")
    assert out == b"late: ok\n" and result["exitCode"] == 0
    log = server.stop(signal.SIGCONT, timeout=15)  # it stops by itself once the job closed
    assert server.process.returncode == 0, log
    assert time.monotonic() - began < 15
    assert "draining" in log and "every process has finished" in log, log


@pytest.mark.parametrize("second", [False, True], ids=["grace-runs-out", "second-signal"])
def test_a_drain_ends_when_its_grace_runs_out_or_at_a_second_signal(
    adapter: str, second: bool
) -> None:
    server = Server(adapter, "--drain-grace", "1" if not second else "60",
                    "--kill-grace", "0.2")
    client = server.client()
    assert "result" in client.call("process/start", {"processId": "sleeper",
                                                     "argv": ["sleep", "60"], **START})
    began = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    if second:
        deadline = time.monotonic() + 10
        while status(server, "/readyz") != 503 and time.monotonic() < deadline:
            time.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
    with pytest.raises(Closed) as closed:
        for _ in range(1000):  # bounded: the close comes within the grace
            client.recv_raw(timeout=15)  # the notifications, then the close frame
    assert closed.value.code == 1001
    log = server.stop(signal.SIGCONT, timeout=15)
    assert server.process.returncode == 0, log
    assert time.monotonic() - began < 10, log
    if not second:
        assert "grace ran out" in log, log
