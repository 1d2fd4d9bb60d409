"""A costly message, or a trace the disk cannot hold, stops nothing but itself (live).

A client sends an array of more values than a message may hold: refused, and the next request
is answered. The trace is written to a tmpfs of 256 KiB, which a few hundred steps fill: one
log line says the trace stopped, and the server goes on serving.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from execproto._jsonrpc import MAX_VALUES

from .conftest import Server, start


def test_too_many_values_are_refused_and_the_server_goes_on(adapter: str) -> None:
    server = Server(adapter)
    try:
        client = server.client()
        client.send_raw("[" + ",".join(["{}"] * (MAX_VALUES + 1)) + "]")
        answer = client.recv(timeout=20)
        assert "at most" in answer["error"]["message"], answer
        start(client, "after", ["true"])
        assert client.events_until_closed("after")[-1]["method"] == "process/closed"
    finally:
        log = server.stop()
    assert server.process.returncode == 0 and "Traceback" not in log, log


@pytest.fixture
def small_disk() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where = Path(tempfile.mkdtemp(prefix="execproto-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], check=True,
                   timeout=30)
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)
    where.rmdir()


def test_a_trace_that_fills_its_disk_stops_and_the_server_goes_on(small_disk: Path) -> None:
    server = Server("asyncio", "--log-level", "warning", "--trace", str(small_disk / "trace.jsonl"))
    try:
        client = server.client()
        for number in range(200):  # each start records a few KiB of steps: well over 256 KiB
            start(client, f"p{number}", ["sh", "-c", "echo " + "x" * 2000])
            client.events_until_closed(f"p{number}")
        reply = client.call("environment/info")
        assert "result" in reply, reply
    finally:
        log = server.stop()
    assert server.process.returncode == 0, log
    assert log.count("the trace stopped") == 1 and "No space left" in log, log
