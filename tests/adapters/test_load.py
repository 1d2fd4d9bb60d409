"""Under load every byte arrives and nothing is left behind: the fast version of bench/load.py.

A real server and real processes: 8 clients x 5 processes at once, then 200 processes one after
another on one connection. Each process's stdout and stderr are checked byte for byte, with its
seqs and exit code, by bench/load.py's own checker; after each phase the server's descriptor
count must be back exactly at its baseline, with no child process and no extra thread left.
(RSS is the bench's business: a closed process keeps its log for 30 s, too long for a test.)
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from .conftest import Server


def _bench_load() -> ModuleType:
    """bench/load.py as a module; bench/ is no package, so it is loaded from its path."""
    path = Path(__file__).resolve().parents[2] / "bench" / "load.py"
    spec = importlib.util.spec_from_file_location("execproto_bench_load", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


load = _bench_load()

CLIENTS, PROCESSES, SIZE = 8, 5, 100_000  # > 64 KiB, a pipe's worth: several chunks each
SEQUENTIAL, SEQUENTIAL_SIZE = 200, 10_000
SESSION_TTL = 1.0
QUIET = SESSION_TTL + 0.5  # longer than a detached session lives: it has had its chance


def _seen(job: Any, chunk: int = 4096) -> Any:
    """What a correct server sends for ``job``: its output in chunks, then exited, closed."""
    out, err = job.stdout(), job.stderr()
    events = [load.Event(0, "process/output", "stdout", out[i:i + chunk])
              for i in range(0, len(out), chunk)]
    events.append(load.Event(0, "process/output", "stderr", err))
    events.append(load.Event(0, "process/exited", exit_code=job.exit_code))
    events.append(load.Event(0, "process/closed"))
    for seq, event in enumerate(events, 1):
        event.seq = seq
    reply = {"id": 1, "result": {"processId": job.process_id}}
    return load.Seen(reply=reply, events=events)


def test_the_check_catches_a_wrong_byte_a_gap_a_reordering_and_a_wrong_exit() -> None:
    job = load.job("c1-2", 7, 20_000)
    good = _seen(job)
    tally = load.check(job, good)
    assert tally.errors == []
    assert tally.bytes_checked == tally.bytes_expected == len(job.stdout()) + len(job.stderr())

    flipped = _seen(job)
    data = bytearray(flipped.events[2].data)
    data[100] ^= 1
    flipped.events[2].data = bytes(data)
    assert any("stdout differs from byte 8292" in e for e in load.check(job, flipped).errors)

    gap = _seen(job)
    del gap.events[1]
    errors = load.check(job, gap).errors
    assert any("seqs are not" in e for e in errors) and any("stdout differs" in e for e in errors)

    swapped = _seen(job)
    swapped.events[1], swapped.events[2] = swapped.events[2], swapped.events[1]
    assert any("out of seq order" in e for e in load.check(job, swapped).errors)

    wrong_exit = _seen(job)
    wrong_exit.events[-2].exit_code = job.exit_code + 1
    assert any("exit code" in e for e in load.check(job, wrong_exit).errors)

    unclosed = _seen(job)
    del unclosed.events[-1]
    assert any("process/closed is not last" in e for e in load.check(job, unclosed).errors)


def _leftovers(pid: int, base: Any, threads: bool = True, timeout: float = 20) -> Any:
    """The server's state once settled: its descriptors as bench/load.py waits for them, and
    (with ``threads``) its threads back down to the baseline (a worker may take a moment to
    end), or the deadline passed."""
    deadline = time.monotonic() + timeout
    after, _ = load.settle(pid, base.fds, QUIET, timeout=timeout)
    while threads and after.threads > base.threads and time.monotonic() < deadline:
        time.sleep(0.05)
        after = load.snapshot(pid)
    return after


def test_many_clients_and_processes_every_byte_and_nothing_left(adapter: str) -> None:
    server = Server(adapter, "--session-ttl", str(SESSION_TTL), "--log-level", "WARNING")
    pid = server.process.pid
    try:
        # A warm-up first, so the baseline includes what the server sets up once, on first use.
        warm = load.concurrent(server.url, 1, 2, SIZE, prefix="w")
        assert warm.errors == []
        base, _ = load.settle(pid, None, QUIET, timeout=20)
        assert base.children == ()

        tally = load.concurrent(server.url, CLIENTS, PROCESSES, SIZE)
        assert tally.errors == []
        assert tally.processes == CLIENTS * PROCESSES
        assert tally.bytes_checked == tally.bytes_expected > CLIENTS * PROCESSES * SIZE
        after = _leftovers(pid, base)
        assert after.children == ()
        assert after.fds == base.fds
        assert after.threads <= base.threads

        tally = load.sequential(server.url, SEQUENTIAL, SEQUENTIAL_SIZE)
        assert tally.errors == []
        assert tally.processes == SEQUENTIAL
        assert tally.bytes_checked == tally.bytes_expected > SEQUENTIAL * SEQUENTIAL_SIZE
        after = _leftovers(pid, base)
        assert after.children == ()
        assert after.fds == base.fds
        assert after.threads <= base.threads
        assert server.process.poll() is None, "the server died under load"

        # The instrument itself: one connection left open is one descriptor over the baseline.
        idle = load.WsClient(server.url)
        idle.handshake()
        assert _leftovers(pid, base, threads=False).fds == base.fds + 1  # its threads stay too
        idle.close()
        assert _leftovers(pid, base).fds == base.fds
    finally:
        log = server.stop()
    assert server.process.returncode == 0, log
    assert "Traceback" not in log, log
