"""A client that asks for much and reads nothing: the server neither grows nor slows."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from .conftest import STARVED, Server, served, start
from .test_limits import rss_mib
from .wsclient import Client

READS = 3000  # each answered with the whole retained MiB: about 4 GB if all were queued


def greedy(server: Server) -> Client:
    """A client whose process has left a full MiB to read, and that will never read again."""
    client = server.client()
    start(client, "big", ["head", "-c", str(1 << 20), "/dev/zero"])
    client.events_until_closed("big")
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    frames = b"".join(
        client.ws.send(_text({"jsonrpc": "2.0", "id": 1000 + i, "method": "process/read",
                              "params": {"processId": "big"}}))
        for i in range(READS)
    )

    def flood() -> None:
        try:
            client.sock.settimeout(60)
            client.sock.sendall(frames)  # blocks once the server stops reading: as it should
        except OSError:
            pass

    threading.Thread(target=flood, daemon=True).start()
    return client


def _text(message: dict[str, object]) -> object:
    from wsproto.events import TextMessage

    return TextMessage(data=json.dumps(message))


def without_gc(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python starts with the cycle collector off: only reference
    counting frees anything, so buffers kept alive by a cycle would stay."""
    (tmp_path / "sitecustomize.py").write_text("import gc\ngc.disable()\n")
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(path for path in paths if path)}


def test_a_client_that_never_reads_its_answers_costs_a_bounded_buffer(
    adapter: str, tmp_path: Path
) -> None:
    server = Server(adapter, "--kill-grace", "0.5", env=without_gc(tmp_path))
    try:
        served(server, "warm")
        baseline = rss_mib(server.process.pid)
        client = greedy(server)
        peak, worst = baseline, 0.0
        for i in range(10):
            worst = max(worst, served(server, f"probe{i}"))
            peak = max(peak, rss_mib(server.process.pid))
            time.sleep(0.3)
        assert peak < baseline + 150, (baseline, peak)
        assert worst < STARVED, worst
        client.sock.close()
        served(server, "after")
        # The heap is trimmed every 2 s: the memory comes back within a few trims.
        deadline = time.monotonic() + 15
        while (after := rss_mib(server.process.pid)) >= baseline + 30:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert after < baseline + 30, (baseline, peak, after)
    finally:
        log = server.stop()
    assert server.process.returncode == 0, log
    assert "Traceback" not in log, log


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def quiet_fd_count(pid: int, quiet: float = 0.5, timeout: float = 10) -> int:
    """The server's descriptor count once it has not changed for ``quiet`` seconds."""
    last, since = fd_count(pid), time.monotonic()
    deadline = since + timeout
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.05)
        if (now := fd_count(pid)) != last:
            last, since = now, time.monotonic()
    return last


def tcp_state(sock: socket.socket) -> int:
    """The socket's TCP state (the first byte of TCP_INFO): 1 is ESTABLISHED."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


def test_a_client_blocked_past_the_send_timeout_is_closed(adapter: str) -> None:
    server = Server(adapter, "--kill-grace", "0.5", "--send-timeout", "1")
    try:
        served(server, "warm")
        fds = quiet_fd_count(server.process.pid)  # without the warm-up's: the count to return to
        client = greedy(server)
        # Wait, without reading, until the server has let go of the connection: its descriptor
        # closed, or the client's end told so (reset, or a FIN that got through).
        deadline = time.monotonic() + 20
        while fd_count(server.process.pid) > fds and tcp_state(client.sock) == 1:
            assert time.monotonic() < deadline, "the blocked client was never closed"
            time.sleep(0.05)
        assert served(server, "probe") < STARVED
        # Closed by the server: what it had sent before the close, then the end.
        client.sock.settimeout(10)
        got = 0
        while True:
            try:
                data = client.sock.recv(1 << 20)
            except ConnectionResetError:
                break
            if not data:
                break
            got += len(data)
            assert got < 64 << 20, "still sending: the connection was not closed"
    finally:
        log = server.stop()
    assert "nothing read for 1.0 s" in log, log
    assert server.process.returncode == 0, log
