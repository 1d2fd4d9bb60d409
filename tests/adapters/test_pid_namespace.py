"""The sandbox's pid namespace, as the reference's `--linux-sandbox-pid-namespace`: its own
(`isolate`, the default: it sees only its own processes) or the host's (`inherit`: it sees
the host's), and nothing of a sandboxed process outlives it either way."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server
from .sandboxes import needs_bwrap, read_only, run

pytestmark = needs_bwrap


@pytest.fixture(params=["isolate", "inherit"])
def mode(request: pytest.FixtureRequest) -> Iterator[tuple[str, Server]]:
    server = Server("asyncio", "--sandbox-pid-namespace", str(request.param))
    yield str(request.param), server
    log = server.stop()
    assert "Traceback" not in log, log


def test_the_host_processes_are_seen_only_when_inherited(mode: tuple[str, Server],
                                                         tmp_path: Path) -> None:
    name, server = mode
    client = server.client()
    host = subprocess.Popen(["sleep", "30"])  # a host process the sandbox could signal
    try:
        ran = run(client, f"ls /proc | grep -qx {host.pid} && echo seen; "
                          f"kill -0 {host.pid} 2>/dev/null && echo signalled; echo $$",
                  read_only(str(tmp_path)))
        assert ran.exit_code == 0, ran
        lines = ran.stdout.split()
        if name == "isolate":
            assert "seen" not in lines and "signalled" not in lines, ran
            assert lines[-1] in ("1", "2"), ran  # the sandbox's own numbering
        else:
            assert "seen" in lines and "signalled" in lines, ran
            assert int(lines[-1]) > 2, ran
    finally:
        host.kill()
        host.wait()


def test_nothing_outlives_a_sandboxed_process(mode: tuple[str, Server], tmp_path: Path) -> None:
    _, server = mode
    client = server.client()
    mark = f"execproto-pid-{os.getpid()}-{time.monotonic_ns()}"
    # A daemon of its own session, its stdio closed: only the cgroup holds it.
    ran = run(client, f"setsid sh -c 'exec -a {mark} sleep 60' </dev/null >/dev/null 2>&1 &"
                      " echo started", read_only(str(tmp_path)))
    assert ran.stdout.strip() == "started", ran
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True).stdout
        if not alive:
            break
        time.sleep(0.05)
    assert not alive, alive
