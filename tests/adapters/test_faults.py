"""Faults a deployment meets: odd process behaviour and a server out of file descriptors."""

from __future__ import annotations

import base64
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from wsproto.events import TextMessage

from execproto.adapters._processes._cgroups import Tree

from .conftest import Server, alive, eventually, start
from .wsclient import Client, Closed, output_of


def test_a_process_that_closes_stdout_early_keeps_running(client: Client) -> None:
    began = time.monotonic()
    start(client, "c", ["sh", "-c", "exec 1>&-; sleep 0.5; echo still here >&2; exit 4"])
    events = client.events_until_closed("c")
    assert time.monotonic() - began >= 0.5  # stdout's EOF closed nothing: the process ran on
    assert output_of(events) == {"stderr": b"still here\n"}
    methods = [n["method"] for n in events]
    assert methods[-2:] == ["process/exited", "process/closed"]
    assert events[-2]["params"]["exitCode"] == 4


def test_a_setsid_daemon_holding_the_pipes_is_abandoned_after_the_grace(client: Client) -> None:
    # The daemon leaves the process group (so the group's signals miss it), ignores the TERM
    # its cgroup gets, and keeps both pipes.
    script = "setsid sh -c 'trap \"\" TERM; echo $$; exec sleep 60' & wait"
    start(client, "d", ["sh", "-c", script])
    first = client.notification(lambda n: n["method"] == "process/output")
    daemon = int(base64.b64decode(first["params"]["chunk"]))
    try:
        began = time.monotonic()
        assert client.result("process/terminate", {"processId": "d"}) == {"running": True}
        events = client.events_until_closed("d", timeout=10)
        # TERM, the exit, then one more grace (0.5 s here) for the pipes: never a hang (the
        # daemon sleeps 60 s).
        assert time.monotonic() - began < 10
        assert [n["method"] for n in events][-1] == "process/closed"
        read = client.result("process/read", {"processId": "d"})
        assert read["closed"] and "abandoned" in (read["failure"] or "")
        if Tree.problem() is None:  # then killed with its cgroup, once the process was finalized
            assert eventually(lambda: not alive(daemon))
        else:
            assert alive(daemon)  # it really did outlive its group: the pipes were held
    finally:
        os.kill(daemon, signal.SIGKILL)



class LimitedServer:
    """A server that may hold only ``nofile`` descriptors at once."""

    def __init__(self, adapter: str, nofile: int) -> None:
        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.process = subprocess.Popen(
            [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0",
             "--adapter", adapter, "--kill-grace", "0.3",
             "--drain-grace", "0"],  # the stop comes with processes running: not a drain
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("ws://"), self.process.communicate(timeout=10)

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=20)
        return err


NOFILE = 64


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def limited(adapter: str) -> Iterator[LimitedServer]:
    server = LimitedServer(adapter, nofile=NOFILE)
    yield server
    if server.process.poll() is None:  # the test failed before it stopped the server
        server.process.kill()
        server.process.communicate()


def test_out_of_descriptors_a_spawn_fails_clearly_and_the_server_recovers(
    limited: LimitedServer,
) -> None:
    server = limited
    client = Client(server.url)
    assert "result" in client.handshake()
    running: list[str] = []
    failure = None
    for i in range(64):  # each process holds a pidfd and pipes
        reply = start(client, f"p{i}", ["sleep", "60"])
        if "error" in reply:
            failure = reply["error"]
            break
        running.append(f"p{i}")
    assert failure is not None and running, "the descriptors never ran out"
    # Refused once the processes' share of the limit is taken (see execproto._descriptors),
    # naming the limit: before the server itself has none left.
    assert failure["code"] == -32600
    assert "out of file descriptors" in failure["message"], failure

    # Take the last descriptors with idle connections, until one is not accepted any more.
    idle: list[Client] = []
    for _ in range(64):
        try:
            idle.append(Client(server.url, timeout=1.0))
        except OSError:  # the upgrade timed out: the server could not accept it, or was slow
            if descriptors(server.process.pid) >= NOFILE:
                break
            # Not out of descriptors: only slow, on a loaded machine. That connection is dropped
            # (closed when its socket is collected); take the next.
    else:
        raise AssertionError("connections were still accepted after 64 more")

    # A connection that arrives now cannot be accepted yet: it waits, and the server does not
    # spin on the listener meanwhile.
    late: dict[str, Client] = {}
    connecting = threading.Thread(target=lambda: late.setdefault("c", Client(server.url,
                                                                              timeout=30)))
    connecting.start()
    before = server.cpu_seconds()
    time.sleep(1.0)
    assert server.cpu_seconds() - before < 0.3
    assert client.result("environment/info", {})  # the connected client is still served

    for other in idle:
        other.close()
    for process_id in running[:6]:
        client.result("process/terminate", {"processId": process_id})
        client.events_until_closed(process_id)
    connecting.join(30)
    assert "c" in late, "the waiting connection was never accepted"
    assert "result" in late["c"].handshake()
    start(late["c"], "after", ["echo", "ok"])
    assert output_of(late["c"].events_until_closed("after")) == {"stdout": b"ok\n"}
    late["c"].close()
    client.close()
    log = server.stop()
    assert server.process.returncode == 0, log
    assert "Traceback" not in log, log


def test_frames_behind_one_that_closes_the_connection_are_dropped_quietly(adapter: str) -> None:
    """A stray notification closes the connection; frames that arrived with it in one read
    must be dropped, not fed to a core that has already forgotten the connection."""
    server = Server(adapter)
    try:
        c = server.client()
        frames = [TextMessage(data=json.dumps({"method": "bogus/notification"}))]
        frames += [TextMessage(data=json.dumps({"id": i, "method": "environment/info"}))
                   for i in range(20)]
        c.sock.sendall(b"".join(c.ws.send(frame) for frame in frames))  # one write, one read
        with pytest.raises(Closed) as closed:
            while True:
                c.recv()
        assert closed.value.code == 1002
        assert "result" in server.client().call("environment/info")
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
