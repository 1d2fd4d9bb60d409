"""The server as a whole: sessions across connections, shutdown, traces, stdio."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from .conftest import Server, alive, eventually, start
from .wsclient import Client


def pids_from(client: Client, process_id: str, count: int) -> list[int]:
    """Read ``count`` whitespace-separated pids the process prints first."""
    text = b""
    while len(text.split()) < count:
        n = client.notification(
            lambda m: m["method"] == "process/output" and m["params"]["processId"] == process_id
        )
        text += base64.b64decode(n["params"]["chunk"])
    return [int(pid) for pid in text.split()[:count]]


def test_resume_within_the_ttl_reads_what_was_written_while_detached(server: Server) -> None:
    first = server.client()
    start(first, "p", ["sh", "-c", "sleep 0.5; echo while-detached"])
    session_id = first.session_id
    first.close()
    time.sleep(1.0)
    second = server.client(handshake=False)
    resumed = second.handshake(resume=session_id)
    assert resumed["result"]["sessionId"] == session_id
    read = second.result("process/read", {"processId": "p", "waitMs": 3000})
    assert base64.b64decode(read["chunks"][0]["chunk"]) == b"while-detached\n"


def test_resume_of_an_unknown_or_attached_session_fails(server: Server) -> None:
    attached = server.client()
    other = server.client(handshake=False)
    unknown = other.handshake(resume="00000000-0000-4000-8000-000000000000")
    assert unknown["error"] == {
        "code": -32600, "message": "unknown session id 00000000-0000-4000-8000-000000000000"}
    busy = other.handshake(resume=attached.session_id)
    assert busy["error"] == {
        "code": -32010,
        "message": f"session {attached.session_id} is already attached to another connection",
    }


def test_an_abandoned_session_is_terminated_after_the_ttl(adapter: str) -> None:
    server = Server(adapter, "--kill-grace", "0.5", "--session-ttl", "0.5")
    try:
        c = server.client()
        start(c, "orphan", ["sh", "-c", "echo $$; exec sleep 60"])
        start(c, "tree", ["sh", "-c", "sleep 60 & echo $$ $!; wait"])
        start(c, "stubborn", ["sh", "-c", "trap '' TERM; sleep 60 & echo $$ $!; wait"])
        pids = pids_from(c, "orphan", 1) + pids_from(c, "tree", 2) + pids_from(c, "stubborn", 2)
        assert all(alive(pid) for pid in pids)
        c.close()  # and never come back
        deadline = time.monotonic() + 15  # the TTL is 0.5 s, the grace 0.5 s: not the sleeps' 60
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid in pids if alive(pid)] == []  # whole trees, even one ignoring TERM
    finally:
        log = server.stop()
    assert server.process.returncode == 0, log
    assert "Traceback" not in log, log


def test_sigterm_stops_every_process_tree_and_exits_0(adapter: str) -> None:
    # No drain: the stop at once. A drain's end stops the same way (test_drain.py).
    server = Server(adapter, "--kill-grace", "0.5", "--drain-grace", "0")
    c = server.client()
    start(c, "tree", ["sh", "-c", "sleep 60 & echo $$ $!; wait"])
    start(c, "stubborn", ["sh", "-c", "trap '' TERM; sleep 60 & echo $$ $!; wait"])
    pids = pids_from(c, "tree", 2) + pids_from(c, "stubborn", 2)
    assert all(alive(pid) for pid in pids)
    began = time.monotonic()
    log = server.stop(signal.SIGTERM)
    assert server.process.returncode == 0, log
    assert time.monotonic() - began < 5
    # Killed, not yet reaped: a killed process exits once it next runs, which on a loaded
    # machine (or with no cgroup to wait on) can be after the server's exit. One left stays.
    assert eventually(lambda: not [pid for pid in pids if alive(pid)]), [
        pid for pid in pids if alive(pid)]


def test_sigkill_of_the_server_takes_its_children_with_it(adapter: str) -> None:
    server = Server(adapter)
    c = server.client()
    for i in range(3):
        start(c, f"k{i}", ["sh", "-c", "echo $$; exec sleep 60"])
    pids = [pids_from(c, f"k{i}", 1)[0] for i in range(3)]
    server.process.kill()
    server.process.wait(5)
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in pids if alive(pid)] == []


def test_a_trace_replays_identically(adapter: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    server = Server(adapter, "--trace", str(trace))
    assert trace.stat().st_mode & 0o777 == 0o600  # the server's user's alone
    c = server.client()
    start(c, "t", ["sh", "-c", "echo out; echo err >&2; exit 3"])
    c.events_until_closed("t")
    c.result("process/read", {"processId": "t"})
    c.close()
    server.stop()
    replayed = subprocess.run(
        [sys.executable, "-m", "execproto.adapters", "replay", str(trace)],
        capture_output=True, text=True, timeout=60,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.startswith("ok: ")


def test_stdio_serves_one_connection_until_eof() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "stdio"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, object]) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps(message).encode() + b"\n")
        server.stdin.flush()

    def receive() -> dict[str, object]:
        assert server.stdout is not None
        return json.loads(server.stdout.readline())

    send({"id": 1, "method": "initialize", "params": {"clientName": "stdio"}})
    assert "sessionId" in receive()["result"]  # type: ignore[operator]
    send({"method": "initialized"})
    send({"id": 2, "method": "process/start", "params": {
        "processId": "p", "argv": ["sh", "-c", "echo hi; exec sleep 60"], "cwd": "file:///tmp",
        "env": {}, "tty": False}})
    seen = [receive(), receive()]
    assert {"id": 2, "jsonrpc": "2.0", "result": {"processId": "p", "sandboxType": "none"}} in seen
    server.stdin.close()  # EOF ends the connection, and with it the server
    assert server.wait(10) == 0
    assert b"Traceback" not in server.stderr.read()  # type: ignore[union-attr]
