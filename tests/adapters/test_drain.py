"""A graceful stop: SIGTERM drains (``--drain-grace``), a second signal stops at once.

While draining, /readyz says 503 and /livez 200, a new upgrade is refused with 503, a start
is refused, and the connections there are go on until the last process closes, so its late
output is read; then the server exits 0. The default grace does the same, and ends well before
Kubernetes' 30 s.
"""

from __future__ import annotations

import base64
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from .conftest import Server, alive, eventually
from .wsclient import Client, Closed, output_of

START = {"cwd": "file:///tmp", "env": {}, "tty": False}


def status(server: Server, path: str) -> int:
    url = server.url.replace("ws://", "http://") + path
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


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
    # Its output and its close come as notifications, all before the server's close frame.
    events = client.events_until_closed("job")
    exited = [e for e in events if e["method"] == "process/exited"]
    assert output_of(events) == {"stdout": b"late: ok\n"}
    assert exited[0]["params"]["exitCode"] == 0
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
    # A tree, its shell ignoring TERM: the drain's end kills whole process groups.
    script = "trap '' TERM; sleep 60 & echo $$ $!; wait"
    assert "result" in client.call("process/start", {"processId": "sleeper",
                                                     "argv": ["sh", "-c", script], **START})
    printed = client.notification(lambda m: m["method"] == "process/output")
    pids = [int(pid) for pid in base64.b64decode(printed["params"]["chunk"]).split()]
    assert len(pids) == 2 and all(alive(pid) for pid in pids), pids
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
    # Killed before the server's exit; a killed process may still be on its way out (state R,
    # having left its cgroup) a moment after: looked for until it is gone, not once.
    assert eventually(lambda: not [pid for pid in pids if alive(pid)]), (pids, log)
    if not second:
        assert "grace ran out" in log, log


def test_a_drain_begun_while_a_cleanup_runs_ends_when_it_is_done(adapter: str) -> None:
    # The last process has closed but its backend's cleanup (a sandbox's, off the owner)
    # still runs when SIGTERM comes: the drain ends with the cleanup, not with its grace.
    server = Server(adapter, "--drain-grace", "30", "--backend",
                    "tests.adapters.recording_backend:make",
                    env={"EXECPROTO_TEST_RECORD": "/dev/null"})
    client = server.client()
    assert "result" in client.call("process/start", {"processId": "slow-cleanup",
                                                     "argv": ["true"], **START})
    client.events_until_closed("slow-cleanup")
    began = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    log = server.stop(signal.SIGCONT, timeout=20)
    assert server.process.returncode == 0, log
    assert time.monotonic() - began < 2.0 + 5, log  # the cleanup, and room for a loaded machine
    assert "every process has finished" in log, log


def default_grace() -> float:
    """The ``--drain-grace`` default that ``execproto serve --help`` states."""
    shown = subprocess.run([sys.executable, "-m", "execproto.adapters", "serve", "--help"],
                           capture_output=True, text=True, timeout=30)
    text = " ".join(shown.stdout.split())  # argparse wraps the lines
    option = text.rsplit("--drain-grace SECONDS", 1)[1].split("--kill-grace", 1)[0]  # not usage
    found = re.search(r"\(default ([0-9.]+)\)", option)
    assert found, option
    return float(found[1])


def test_by_default_a_stop_drains_and_for_less_than_kubernetes_30_s() -> None:
    # Kubernetes sends SIGKILL 30 s after SIGTERM unless told otherwise: the default grace
    # must end before it, and be long enough for the 1 s job below to finish.
    grace = default_grace()
    assert 1 < grace < 30, grace
    server = Server("asyncio", drain_grace=None)  # the server's own default
    client = server.client()
    assert "result" in client.call("process/start", {
        "processId": "job", "argv": ["sh", "-c", "sleep 1; echo finished"], **START})
    began = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    events = client.events_until_closed("job")
    assert output_of(events) == {"stdout": b"finished\n"}
    exited = [e for e in events if e["method"] == "process/exited"]
    assert exited[0]["params"]["exitCode"] == 0
    log = server.stop(signal.SIGCONT, timeout=15)  # it stops by itself once the job closed
    assert server.process.returncode == 0, log
    assert time.monotonic() - began < grace, log
    # It drained for the help's default, and stopped because the job finished.
    assert f"or in {grace:g} s" in log and "every process has finished" in log, log


def test_a_stop_sends_what_is_queued_and_then_the_close_frame(adapter: str) -> None:
    # Output still streaming when SIGTERM comes: before, the trio adapter exited with the
    # close frame (and what was queued before it) unsent in 7 runs of 8, the threads one in 1.
    for _ in range(3):  # bounded: the loss showed in most single runs
        server = Server(adapter, "--log-level", "warning")  # --drain-grace 0: a stop at once
        client = server.client()
        assert "result" in client.call("process/start", {
            "processId": "stream", "argv": ["sh", "-c", "yes | head -c 3000000"], **START})
        client.recv_raw()  # the stream has begun
        server.process.send_signal(signal.SIGTERM)
        with pytest.raises(Closed) as closed:
            for _ in range(100_000):  # bounded: 3 MB in notifications, then the close
                client.recv_raw(timeout=15)
        log = server.stop()
        assert closed.value.code == 1001, log
