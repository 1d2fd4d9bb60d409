"""The case the product exists for: a parent exits while a descendant still holds its pipes."""

from execproto import Finalize, Signal

from .harness import Harness, unb64


def test_late_output_after_exit_is_sequenced_and_delivered(h: Harness) -> None:
    script = "(sleep 1; echo LATE_STDOUT; echo LATE_STDERR >&2) & exit 7"
    proc = h.start(1, "p", ["sh", "-c", script])
    h.exit(proc, 7)

    # An interrupt between exit and close must not signal: the pid is about to be reaped.
    signal_reply = h.call(1, "process/signal", {"processId": "p", "signal": "interrupt"})
    assert signal_reply["result"] == {}
    assert h.of_type(Signal) == []

    # A long-poll read at the cursor after the exit waits for the late output.
    read_id = h.request(1, "process/read", {"processId": "p", "afterSeq": 1, "waitMs": 5000})
    assert h.response(1, read_id) is None
    h.advance(0.5)
    assert h.response(1, read_id) is None

    h.output(proc, "stdout", b"LATE_STDOUT\n")
    read = h.response(1, read_id)
    assert read is not None
    result = read["result"]
    assert [(c["seq"], c["stream"], unb64(c["chunk"])) for c in result["chunks"]] == [
        (2, "stdout", b"LATE_STDOUT\n")
    ]
    assert result["exited"] is True and result["exitCode"] == 7 and result["closed"] is False
    assert result["nextSeq"] == 3

    h.output(proc, "stderr", b"LATE_STDERR\n")
    h.eof(proc, "stdout")
    assert h.of_type(Finalize) == []  # stderr is still open
    h.eof(proc, "stderr")

    events = [(n["method"], n["params"]["seq"]) for n in h.notifications(1)]
    assert events == [
        ("process/exited", 1),
        ("process/output", 2),
        ("process/output", 3),
        ("process/closed", 4),
    ]
    exited = h.notifications(1, "process/exited")
    assert len(exited) == 1 and exited[0]["params"]["exitCode"] == 7
    assert h.of_type(Finalize) == [
        Finalize(proc=proc, status="completed", exit_code=7, timed_out=False)]
    # Finalize is the very last action: after the last stream's EOF, never before.
    assert h.actions[-1] == Finalize(proc=proc, status="completed", exit_code=7, timed_out=False)
    h.assert_replays()
