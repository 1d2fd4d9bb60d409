"""After an exception escapes `handle()`, the core is stopped: it refuses every later call.

A call cut short may have applied part of its work and lost the actions it made (a KILL from
its deadline pass, say), so going on would act on a state nobody can describe; h11 enters ERROR
for the same reason.
"""

from __future__ import annotations

import json

import pytest

from execproto import (
    LocalProtocolError,
    ProcessExited,
    Recorder,
    ServerCore,
    Signal,
    StreamClosed,
    Tick,
    replay,
)

from .harness import Harness


class CountingKills(ServerCore):
    """A core that counts its KILL deadlines, to tell whether a refused call ran any."""

    kills_due = 0

    def _on_kill_due(self, proc: int) -> None:
        self.kills_due += 1
        super()._on_kill_due(proc)


def terminated(core: ServerCore) -> tuple[Harness, int]:
    """A running process with stdout at EOF, terminated at t=0 (KILL due at t=1)."""
    h = Harness()
    h.lines = []
    h.core = Recorder(core, h.lines.append)
    h.connect(1)
    h.handshake(1)
    proc = h.start(1, "p")
    h.feed(StreamClosed(proc=proc, stream="stdout"))
    assert h.call(1, "process/terminate", {"processId": "p"})["result"] == {"running": True}
    assert h.core.next_deadline() == 1.0
    return h, proc


@pytest.mark.parametrize("stream", ["stdout", "bogus"])
def test_an_impossible_event_is_refused_before_its_deadlines_run(stream: str) -> None:
    core = CountingKills()
    h, proc = terminated(core)
    h.now = 2.0
    with pytest.raises(LocalProtocolError, match="is not open") as info:
        h.feed(StreamClosed(proc=proc, stream=stream))
    assert core.kills_due == 0  # refused first: no KILL made and lost
    assert core.error is info.value and h.core.error is info.value
    assert core.next_deadline() is None  # the KILL at t=1 is not asked for any more
    with pytest.raises(LocalProtocolError, match="stopped after an earlier error") as later:
        h.feed(Tick())
    assert "is not open" in str(later.value)
    assert later.value.__cause__ is info.value
    assert core.kills_due == 0
    h.assert_replays()  # the error, and the refusal after it, replay the same


def test_an_error_inside_a_handler_stops_the_core() -> None:
    h, proc = terminated(ServerCore())
    h.now = 2.0
    h.feed(ProcessExited(proc=proc, returncode=-9))
    with pytest.raises(LocalProtocolError, match="impossible") as info:
        h.feed(ProcessExited(proc=proc, returncode=-9))  # twice: found by the process's table
    assert h.core.error is info.value
    assert h.core.next_deadline() is None
    for event in (Tick(), StreamClosed(proc=proc, stream="stderr")):
        with pytest.raises(LocalProtocolError, match="stopped after an earlier error"):
            h.feed(event)


class Broken(ServerCore):
    """A core with a bug: a deadline handler that raises what no adapter could cause."""

    def _on_kill_due(self, proc: int) -> None:
        raise KeyError(proc)


def test_a_bug_of_the_core_propagates_unchanged_and_stops_it() -> None:
    core = Broken()
    h, proc = terminated(core)
    h.now = 2.0
    with pytest.raises(KeyError) as info:
        h.feed(Tick())
    assert core.error is info.value
    assert core.next_deadline() is None
    with pytest.raises(LocalProtocolError, match=r"stopped after an earlier error: KeyError: 1"):
        h.feed(StreamClosed(proc=proc, stream="stderr"))
    errors = [json.loads(line)["error"] for line in h.lines if '"error"' in line]
    assert errors[0] == "KeyError: 1"  # the step that broke the core is in the trace


def test_the_trace_of_a_bug_replays_to_the_same_error() -> None:
    h, _ = terminated(Broken())
    h.now = 2.0
    with pytest.raises(KeyError):
        h.feed(Tick())
    # A fresh core has no such bug: the replay says where it differs, and does not crash.
    result = replay(h.lines)
    assert not result.ok and result.expected == {"error": "KeyError: 1"}
    assert [action["$type"] for action in result.actual] == ["Signal"]


def test_a_core_that_never_failed_has_no_error() -> None:
    h, proc = terminated(ServerCore())
    h.now = 2.0
    assert Signal(proc=proc, signal="KILL") in h.feed(Tick())
    assert h.core.error is None
