"""What an operator reads at INFO: a line per connection, refused login, process start and exit;
as JSON objects with ``--log-format json``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .conftest import Server, about_the_host, start
from .sandboxes import BWRAP_PROBLEM
from .test_metrics import http
from .wsclient import Client

EXEC = [sys.executable, "-m", "execproto.adapters", "exec"]


def records(log: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.splitlines()]


def resumed(server: Server, session: str) -> Client:
    """A new connection resuming ``session``, once the server has seen the old one close."""
    deadline = time.monotonic() + 10
    while True:
        client = server.client(handshake=False, headers=[("Authorization", "Bearer right")])
        if "result" in client.handshake(resume=session):
            return client
        client.close()
        assert time.monotonic() < deadline, "the session never came free"
        time.sleep(0.05)


def test_connections_logins_and_processes_are_logged(adapter: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("right\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("wrong\n")
    server = Server(adapter, "--log-format", "json", "--auth-token-file", str(token))
    try:
        done = subprocess.run([*EXEC, server.url, "--auth-token-file", str(token), "--cwd", "/tmp",
                               "--", "sh", "-c", "printf 12345; exit 3"], capture_output=True)
        assert (done.returncode, done.stdout) == (3, b"12345")
        refused = subprocess.run([*EXEC, server.url, "--auth-token-file", str(wrong), "--",
                                  "true"], capture_output=True)
        assert refused.returncode == 255
        first = server.client(headers=[("Authorization", "Bearer right")])
        session = first.session_id
        first.close()
        again = resumed(server, session)
        start(again, "p", ["true"])
        again.events_until_closed("p")
        again.close()
    finally:
        log = server.stop()
    lines = records(log)
    assert all(line["level"] in ("info", "warning") for line in lines), log
    connections = [line for line in lines if "session" in line and "resumed" in line]
    assert [line["resumed"] for line in connections] == [False, False, True], log
    assert connections[2]["session"] == session
    # A resume refused while the old connection is still attached says so, at INFO.
    assert all("already attached" in line["refused"] for line in lines
               if "initialize refused" in line["message"])
    assert all(line["peer"].startswith("websocket 127.0.0.1:") for line in connections)
    [login] = [line for line in lines
               if line["level"] == "warning" and not about_the_host(line["message"])]
    assert login["level"] == "warning" and login["refused"] == "wrong bearer token"
    started = [line for line in lines if "pid" in line]
    assert [(s["program"], s["cwd"], s["sandbox"]) for s in started] == [
        ("sh", "/tmp", "none"), ("true", "/tmp", "none")]
    exited = [line for line in lines if "code" in line]
    assert [(e["code"], e["bytes"]) for e in exited] == [(3, 5), (0, 0)], log
    assert [e["process"] for e in exited] == [s["process"] for s in started]
    assert "right" not in log  # the token itself never


def test_text_lines_by_default_and_nothing_below_the_level(tmp_path: Path) -> None:
    server = Server("asyncio", "--log-level", "warning")
    try:
        assert subprocess.run([*EXEC, server.url, "--", "true"]).returncode == 0
    finally:
        log = server.stop()
    assert [line for line in log.splitlines() if not about_the_host(line)] == []
    server = Server("asyncio", "--log-level", "info")
    try:
        assert subprocess.run([*EXEC, server.url, "--", "true"]).returncode == 0
    finally:
        log = server.stop()
    assert " INFO execproto: process " in log and " started: pid " in log, log
    assert "exited: code 0" in log, log


def test_the_start_a_failed_spawn_and_the_stop_are_logged(adapter: str, tmp_path: Path) -> None:
    # Under --sandbox bwrap where bubblewrap works, so that the floor is in the start's line.
    floor = ([] if BWRAP_PROBLEM is not None
             else ["--sandbox", "bwrap", "--writable-root", str(tmp_path)])
    server = Server(adapter, "--log-format", "json", *floor)
    try:
        client = server.client()
        missing = start(client, "missing", ["/nonexistent/program"])
        assert missing["error"]["data"]["kind"] == "spawnNotFound", missing
    finally:
        log = server.stop()
    assert server.process.returncode == 0, log
    lines = records(log)
    messages = [line["message"] for line in lines]
    [sandbox] = [m for m in messages if m.startswith("sandbox: ")]
    if floor:
        assert sandbox.endswith(f"every process is sandboxed, at most: read /, write "
                                f"{tmp_path.resolve()}; no network"), sandbox
    [listening] = [line for line in lines if line["message"].startswith("listening on ")]
    assert listening["message"] == f"listening on {server.url} (no TLS)", listening
    assert listening["tls"] is False and listening["address"] == server.url
    [failed] = [line for line in lines if "did not start" in line["message"]]
    assert failed["message"].startswith("process missing did not start (spawnNotFound): ")
    assert (failed["level"], failed["program"], failed["failure"]) == (
        "info", "/nonexistent/program", "spawnNotFound"), failed
    [stopping] = [line for line in lines if line["message"].startswith("stopping: ")]
    assert (stopping["connections"], stopping["processes"]) == (1, 0), stopping
    assert messages[-1] == "stopped", messages
    assert messages.index(stopping["message"]) < len(messages) - 1


def test_a_start_up_error_is_a_json_line_under_log_format_json() -> None:
    serve = [sys.executable, "-m", "execproto.adapters", "serve", "--log-format", "json"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = {
            "unrecognized arguments: --bogus": ["--bogus"],
            "wss:// needs --tls-cert FILE and --tls-key FILE": ["--listen", "wss://127.0.0.1:0"],
            f"cannot listen on ws://127.0.0.1:{port}: the port is in use": [
                "--listen", f"ws://127.0.0.1:{port}"],
        }
        for expected, args in cases.items():
            done = subprocess.run([*serve, *args], capture_output=True, text=True, timeout=30)
            assert done.returncode == 2, done
            # Every line is JSON (a bind fails after the sandbox's line), one of them the error.
            [line] = [line for line in records(done.stderr) if line["level"] == "error"]
            assert line["logger"] == "execproto", line
            assert line["message"].startswith(f"execproto serve: {expected}"), line
    # Without it, the same error is plain text.
    done = subprocess.run([*serve[:-2], "--bogus"], capture_output=True, text=True, timeout=30)
    assert done.stderr.startswith("execproto serve: unrecognized arguments: --bogus"), done


def _running(*argv: str) -> bool:
    """Whether a process whose command line ends with ``argv`` runs (its program may be named
    by its path): read from /proc, not by pgrep, which a machine without procps lacks."""
    tail = b"\0".join(word.encode() for word in argv) + b"\0"
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().endswith(tail):
                return True
        except OSError:
            pass  # gone meanwhile
    return False


def test_an_expired_sessions_terminated_processes_are_logged() -> None:
    """Its processes were terminated without a word in the log."""
    server = Server("asyncio", "--log-format", "json", "--session-ttl", "0.5",
                    "--kill-grace", "0.5")
    try:
        client = server.client()
        session = client.session_id
        assert "result" in start(client, "sleeper", ["sleep", "30.25"])
        client.close()  # and never resumed
        deadline = time.monotonic() + 10
        # The start is answered once the child is forked; it is the sleep once it has
        # exec'd (a loaded machine can take a while), and only then can it be seen to go.
        while not _running("sleep", "30.25"):
            assert time.monotonic() < deadline, "the sleep never started"
            time.sleep(0.02)
        # Until the sleep is gone: the line is written as the core tells it to stop.
        while _running("sleep", "30.25"):
            assert time.monotonic() < deadline, "the expired session's process still runs"
            time.sleep(0.1)
    finally:
        log = server.stop()
    [expired] = [line for line in records(log) if "expired" in line["message"]]
    assert expired["message"] == (f"session {session} expired (its client did not resume it): "
                                  "1 of its processes are terminated (sleeper)"), expired
    assert expired["terminated"] == ["sleeper"], expired


def test_a_clean_exec_ends_its_session_at_once(tmp_path: Path) -> None:
    """It left a detached session for the TTL (counted in the metrics, and against the
    detached sessions others need room among); now `exec` ends it (`session/end`)."""
    token = tmp_path / "token"
    token.write_text("right\n")
    server = Server("asyncio", "--log-format", "json", "--session-ttl", "60",
                    "--auth-token-file", str(token))
    try:
        done = subprocess.run([*EXEC, "--auth-token-file", str(token), server.url, "--", "sh",
                               "-c", "exit 3"], capture_output=True, timeout=60)
        assert (done.returncode, done.stderr) == (3, b"")
        # The server sees the connection close a moment after exec has its answer: asked
        # until then, bounded far below the TTL (60 s) a detached session would wait.
        deadline = time.monotonic() + 10
        while True:
            status, _, metrics = http(server, "/metrics", "right")
            if "exec_server_sessions_detached 0.0" in metrics or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        log = server.stop()
    assert status == 200 and "exec_server_sessions_detached 0.0" in metrics, metrics
    assert "exec_server_sessions_attached 0.0" in metrics, metrics
    [ended] = [line for line in records(log) if "ended by its client" in line["message"]]
    assert ended["terminated"] == [] and ended["ended"] is True, ended
