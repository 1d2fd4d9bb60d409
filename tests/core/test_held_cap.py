"""The output held for detached sessions is capped as a whole: past the cap, every process of
a detached session is paused; a client that comes back, or output that goes, lets them run."""

from __future__ import annotations

from execproto import Config, PauseOutput, ResumeOutput

from .harness import Harness


def paused(h: Harness, since: int) -> list[tuple[str, int]]:
    return [(type(a).__name__, a.proc) for a in h.actions[since:]
            if isinstance(a, (PauseOutput, ResumeOutput))]


def two_detached_sessions(cap: int) -> tuple[Harness, str, int, int]:
    h = Harness(Config(max_held_bytes=cap))
    h.connect(1)
    session = h.handshake(1)["result"]["sessionId"]
    first = h.start(1, "a")
    h.connect(2)
    h.handshake(2)
    second = h.start(2, "b")
    h.disconnect(1)
    h.disconnect(2)
    return h, session, first, second


def test_past_the_cap_every_detached_process_pauses() -> None:
    h, _, first, second = two_detached_sessions(cap=100)
    mark = len(h.actions)
    h.output(first, "stdout", b"x" * 60)
    assert paused(h, mark) == []  # under the cap: held, running
    h.output(second, "stdout", b"y" * 60)
    assert sorted(paused(h, mark)) == [("PauseOutput", first), ("PauseOutput", second)]
    h.assert_replays()


def test_a_client_that_comes_back_takes_its_output_off_the_total() -> None:
    h, session, first, second = two_detached_sessions(cap=100)
    h.output(first, "stdout", b"x" * 60)
    h.output(second, "stdout", b"y" * 60)
    mark = len(h.actions)
    h.connect(3)
    h.handshake(3, resume=session)  # session 1 is back: 60 bytes held for the detached remain
    assert sorted(paused(h, mark)) == [("ResumeOutput", first), ("ResumeOutput", second)]


def test_terminating_a_held_process_frees_its_share() -> None:
    h, _, first, second = two_detached_sessions(cap=100)
    h.output(first, "stdout", b"x" * 60)
    h.output(second, "stdout", b"y" * 60)
    mark = len(h.actions)
    h.advance(Config().session_ttl + 1)  # both sessions expire: their processes terminate
    assert ("ResumeOutput", first) in paused(h, mark)  # released, so their pipes can drain


def test_attached_sessions_are_never_paused_for_the_detached_total() -> None:
    h = Harness(Config(max_held_bytes=10))
    h.connect(1)
    h.handshake(1)
    proc = h.start(1, "a")
    mark = len(h.actions)
    h.output(proc, "stdout", b"x" * 50)
    assert paused(h, mark) == []
