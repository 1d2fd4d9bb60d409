"""The checks every `lifecycle_world.World` runs at teardown, shown to catch violations; and
the parts alone: the output log and a process's write-id memory.
"""

from __future__ import annotations

import pytest

from execproto import (
    Action,
    Event,
    Finalize,
    ProcessExited,
    ProcessSpawned,
    Signal,
    Spawn,
    SpawnFailed,
    SpawnSpec,
    StreamClosed,
    Tick,
)
from execproto._output import Chunk, OutputLog
from execproto._process import Process
from execproto._session import Session

from .lifecycle_world import (
    check_lifecycle,
    check_notifications,
)

# =================================================================================================
# the checker itself, and the parts alone
# =================================================================================================


def _spawn_action(proc: int) -> Spawn:
    spec = SpawnSpec(
        argv=("sh",),
        arg0=None,
        cwd="/",
        env=(),
        tty=False,
        pipe_stdin=False,
        session_id="s",
        process_id="p",
    )
    return Spawn(proc=proc, spec=spec)


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [
                (Tick(), [_spawn_action(1)]),
                (ProcessSpawned(proc=1, pid=9), []),
                (ProcessExited(proc=1, returncode=0), []),
                (Tick(), [Signal(proc=1, signal="KILL")]),
            ],
            id="signal-after-exit",
        ),
        pytest.param(
            [(Tick(), [_spawn_action(1), Signal(proc=1, signal="TERM")])],
            id="signal-before-spawn",
        ),
        pytest.param(
            [
                (Tick(), [_spawn_action(1)]),
                (ProcessSpawned(proc=1, pid=9), []),
                (StreamClosed(proc=1, stream="stdout"), []),
                (
                    ProcessExited(proc=1, returncode=0),
                    [Finalize(proc=1, status="completed", exit_code=0, timed_out=False)],
                ),
            ],
            id="finalize-with-a-stream-open",
        ),
        pytest.param(
            [
                (Tick(), [_spawn_action(1)]),
                (
                    SpawnFailed(proc=1, error="x"),
                    [Finalize(proc=1, status="failed", exit_code=None, timed_out=False)] * 2,
                ),
            ],
            id="finalize-twice",
        ),
    ],
)
def test_the_lifecycle_checker_catches_violations(
    steps: list[tuple[Event, list[Action]]],
) -> None:
    with pytest.raises(AssertionError):
        check_lifecycle(steps)


@pytest.mark.parametrize(
    "seqs",
    [
        [("output", 2)],
        [("exited", 1), ("exited", 2)],
        [("output", 1), ("closed", 2)],
        [("exited", 1), ("closed", 2), ("output", 3)],
    ],
)
def test_the_notification_checker_catches_violations(seqs: list[tuple[str, int]]) -> None:
    notifications = [
        {
            "method": f"process/{method}",
            "params": {
                "processId": "p",
                "seq": seq,
                "stream": "stdout",
                "exitCode": 0,
                "sandboxDenied": False,
            },
        }
        for method, seq in seqs
    ]
    with pytest.raises(AssertionError):
        check_notifications(notifications)


def test_output_log_alone() -> None:
    log = OutputLog(max_bytes=6, max_chunks=100)
    assert (len(log), log.first_retained_seq, log.has_after(0)) == (0, None, False)
    assert log.read(0, None) == ([], False) and log.read(0, 5) == ([], False)
    log.append(2, "stdout", b"abc")
    log.append(4, "stderr", b"de")  # seqs need not be contiguous: exit takes one too
    assert log.has_after(3) and not log.has_after(4)
    assert log.read(2, None) == ([Chunk(4, "stderr", b"de")], False)
    assert log.read(0, 4) == ([Chunk(2, "stdout", b"abc")], True)
    log.append(5, "stdout", b"fg")  # 7 bytes: the oldest chunk goes
    assert (len(log), log.first_retained_seq, log.retained_bytes) == (2, 4, 4)
    assert (log.dropped_bytes, log.dropped_chunks) == (3, 1)


def test_process_remembers_write_ids_first_in_first_out() -> None:
    process = Process(
        1,
        "p",
        Session("s"),
        tty=False,
        pipe_stdin=True,
        retention_bytes=1024,
        retention_chunks=16,
    )
    process.remember_write("a", 2)
    process.remember_write("b", 2)
    assert list(process.write_ids) == ["a", "b"]
    process.remember_write("c", 2)  # "a" falls out, oldest first
    assert list(process.write_ids) == ["b", "c"]
