"""A live server whose core raises (a bug) stops at once: its processes killed, its clients
closed with 1011, the reason logged once, and a non-zero exit status. Embedded, it leaves the
host's process none of its clients' fs handles."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import alive, start, uri
from .wsclient import Client, Closed

HERE = Path(__file__).resolve().parent
REASON = "the server is stopping because its core failed on MessageReceived, a bug in execproto"


def first_output(client: Client, process_id: str) -> bytes:
    n = client.notification(
        lambda m: m["method"] == "process/output" and m["params"]["processId"] == process_id)
    return base64.b64decode(n["params"]["chunk"])


def test_a_core_failure_stops_the_server_and_all_it_started(adapter: str) -> None:
    server = subprocess.Popen(
        [sys.executable, str(HERE / "core_fault_server.py"), "serve",
         "--listen", "ws://127.0.0.1:0", "--adapter", adapter],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        client = Client(server.stdout.readline().strip())
        assert "result" in client.handshake()
        start(client, "p", ["sh", "-c", "echo $$; exec sleep 60"])
        pid = int(first_output(client, "p"))
        assert alive(pid)
        client.request("environment/status")  # the trigger: the core raises on it
        began = time.monotonic()
        with pytest.raises(Closed) as closed:
            while True:
                client.recv(timeout=15)
        assert closed.value.code == 1011
        _, log = server.communicate(timeout=15)
        took = time.monotonic() - began
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 1, log
    assert took < 10, log  # about CLOSE_WAIT at most; generous for a loaded machine
    deadline = time.monotonic() + 5  # killed and reaped before the exit; a moment's slack
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert REASON in log, log
    assert log.count("Traceback") == 1, log  # the core's, logged once with the reason
    assert "RuntimeError: injected core failure" in log, log


# An embedded server whose core fails: once `serve` has raised, the host's process says how
# many of its descriptors still point at the file a client had open through fs/open.
EMBEDDED = """\
import asyncio, os, sys
from execproto import ServerCore
from execproto.adapters import asyncio as adapted

def _raise(*args):
    raise RuntimeError("injected core failure")

ServerCore._environment_status = _raise

async def main():
    try:
        await adapted.serve("ws://127.0.0.1:0", ready=lambda url: print(url, flush=True))
    except adapted.CoreFailed:
        pass
    held = [fd for fd in os.listdir("/proc/self/fd")
            if os.path.realpath(f"/proc/self/fd/{fd}") == sys.argv[1]]
    print(len(held), flush=True)

asyncio.run(main())
"""


def test_an_embedding_host_keeps_no_handle_after_a_core_failure(tmp_path: Path) -> None:
    target = tmp_path / "held"
    target.write_bytes(b"x")
    host = subprocess.Popen([sys.executable, "-c", EMBEDDED, str(target.resolve())],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        client = Client(host.stdout.readline().strip())
        assert "result" in client.handshake()
        client.result("fs/open", {"handleId": "h", "path": uri(target), "mode": "read"})
        client.request("environment/status")  # the trigger: the core raises on it
        with pytest.raises(Closed):
            while True:
                client.recv(timeout=15)
        out, log = host.communicate(timeout=15)
    finally:
        if host.poll() is None:
            host.kill()
            host.communicate()
    assert host.returncode == 0, log
    assert out.strip() == "0", log
