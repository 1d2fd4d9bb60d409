"""Spawn backends end to end: the finalize contract, and the bwrap sandbox."""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, start
from .wsclient import Client, output_of


@pytest.fixture
def recorded(adapter: str, tmp_path: Path) -> Iterator[tuple[Client, Path]]:
    record = tmp_path / "calls.jsonl"
    record.touch()
    server = Server(adapter, "--backend", "tests.adapters.recording_backend:make",
                    env={"EXECPROTO_TEST_RECORD": str(record)})
    yield server.client(), record
    server.stop()


def calls(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def finalizes(record: Path, token: str, wait: float = 15) -> list[dict[str, Any]]:
    deadline = time.monotonic() + wait  # finalize runs just after `closed` is sent
    while True:
        found = [c for c in calls(record) if c["call"] == "finalize" and c["token"] == token]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_exit_drain_through_a_backend_finalizes_once_after_close(recorded: tuple[Client, Path],
                                                                 tmp_path: Path) -> None:
    client, record = recorded
    release = tmp_path / "release"  # the descendant holds the pipes until the test touches it
    script = (f"(while [ ! -e {shlex.quote(str(release))} ]; do sleep 0.02; done; echo LATE)"
              " & exit 7")
    start(client, "drain", ["sh", "-c", script])
    try:
        client.notification(lambda n: n["method"] == "process/exited")
        time.sleep(0.2)  # exited, a descendant still holds the pipes: no finalize yet
        assert finalizes(record, "token-drain", wait=0) == []
    finally:
        release.touch()
    events = client.events_until_closed("drain")
    assert output_of(events) == {"stdout": b"LATE\n"}
    assert finalizes(record, "token-drain") == [{"call": "finalize", "token": "token-drain",
                                                 "status": "completed", "exit_code": 7,
                                                 "timed_out": False}]
    time.sleep(0.2)
    assert len(finalizes(record, "token-drain", wait=0)) == 1


def test_a_spawn_failure_finalizes_failed_with_no_exit_code(recorded: tuple[Client, Path]) -> None:
    client, record = recorded
    reply = start(client, "missing", ["/no/such/program"])
    assert reply["error"]["data"] == {"kind": "spawnNotFound"}  # type: ignore[index]
    assert finalizes(record, "token-missing") == [{"call": "finalize", "token": "token-missing",
                                                   "status": "failed", "exit_code": None,
                                                   "timed_out": False}]


def test_a_refusal_is_invalid_params_and_nothing_runs(recorded: tuple[Client, Path]) -> None:
    client, record = recorded
    reply = start(client, "refused", ["refuse-me"])
    assert reply["error"] == {"code": -32602,
                              "message": "refuse-me cannot be enforced by this backend"}
    assert calls(record) == []  # no prepare succeeded, so no finalize is owed


def test_a_prepare_that_crashes_fails_the_start_and_the_server_serves_on(
        recorded: tuple[Client, Path]) -> None:
    client, record = recorded
    reply = start(client, "crash", ["crash-me"])
    assert reply["error"]["code"] == -32603, reply  # type: ignore[index]
    assert "RuntimeError: prepare crashed" in reply["error"]["message"]  # type: ignore[index]
    assert calls(record) == []  # no prepare succeeded, so no finalize is owed
    start(client, "crash", ["true"])  # the id is free again, and spawns still work
    assert client.events_until_closed("crash")


def test_a_finalize_that_raises_is_the_process_failure(recorded: tuple[Client, Path]) -> None:
    client, record = recorded
    start(client, "explode", ["true"])
    client.events_until_closed("explode")
    assert finalizes(record, "token-explode")
    deadline = time.monotonic() + 15
    while True:
        read = client.result("process/read", {"processId": "explode"})
        if read["failure"] or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert read["failure"] == "finalize failed: RuntimeError: finalize exploded"
    start(client, "after", ["true"])  # and the server keeps serving
    client.events_until_closed("after")


def _bwrap_problem() -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "true"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"bwrap cannot run here: {probe.stderr.strip()}"


BWRAP_PROBLEM = _bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")


@pytest.fixture
def sandboxed(adapter: str, tmp_path: Path) -> Iterator[tuple[Server, Client, Path]]:
    writable = tmp_path / "writable"
    writable.mkdir()
    server = Server(adapter, "--sandbox", "bwrap", "--writable-root", str(writable))
    yield server, server.client(), writable
    server.stop()


@needs_bwrap
def test_bwrap_confines_writes_network_and_processes(sandboxed: tuple[Server, Client, Path],
                                                    tmp_path: Path) -> None:
    server, client, writable = sandboxed
    reply = start(client, "w", ["sh", "-c", f"echo in > {writable}/ok; echo out > {tmp_path}/no"])
    assert reply["result"]["sandboxType"] == "linuxSeccomp"  # type: ignore[index]
    events = client.events_until_closed("w")
    assert (writable / "ok").read_text() == "in\n"
    assert not (tmp_path / "no").exists()
    assert b"Read-only file system" in output_of(events)["stderr"]

    with socket.socket() as listener:  # a port that is open on the host's loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        start(client, "net", ["python3", "-c", probe])
        events = client.events_until_closed("net")
    exited = [n for n in events if n["method"] == "process/exited"][0]
    assert exited["params"]["exitCode"] != 0

    visible = f"test -e /proc/{server.process.pid} && echo visible || echo hidden"
    start(client, "ps", ["sh", "-c", visible])
    assert output_of(client.events_until_closed("ps"))["stdout"] == b"hidden\n"


def test_an_unusable_sandbox_is_refused_at_start_up(tmp_path: Path) -> None:
    import sys

    refused = subprocess.run(
        [sys.executable, "-m", "execproto.adapters", "serve", "--sandbox", "bwrap"],
        capture_output=True, text=True, timeout=30, env={"PATH": str(tmp_path)},
    )
    assert refused.returncode == 2
    assert "needs bubblewrap" in refused.stderr
