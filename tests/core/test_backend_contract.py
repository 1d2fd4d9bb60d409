"""What the core promises a spawn backend: refusals, and a finalize hook that may fail."""

import pytest

from execproto import Finalize, FinalizeFailed, LocalProtocolError, Spawn, SpawnFailed

from .harness import Harness


def test_a_refused_spawn_is_invalid_params_and_is_finalized_as_failed(h: Harness) -> None:
    msg_id = h.request(1, "process/start", {"processId": "p", "argv": ["x"], "cwd": "file:///",
                                            "env": {}, "tty": False})
    (spawn,) = h.of_type(Spawn)
    message = "network access cannot be enforced by this sandbox"
    h.feed(SpawnFailed(proc=spawn.proc, error=message, refused=True))
    assert h.response(1, msg_id) == {"jsonrpc": "2.0", "id": msg_id,
                                     "error": {"code": -32602, "message": message}}
    assert h.of_type(Finalize) == [Finalize(proc=spawn.proc, status="failed", exit_code=None,
                                            timed_out=False)]


def test_a_failed_finalize_is_recorded_as_the_process_failure(h: Harness) -> None:
    proc = h.start(1, "p")
    h.exit(proc, 0)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    h.feed(FinalizeFailed(proc=proc, error="backend exploded"))
    read = h.call(1, "process/read", {"processId": "p"})["result"]
    assert read["failure"] == "finalize failed: backend exploded"
    assert read["closed"] is True
    h.advance(31)  # evicted: a late report is dropped, not an error
    assert h.feed(FinalizeFailed(proc=proc, error="late")) == []
    h.assert_replays()


def test_finalize_failed_for_a_handle_never_issued_is_an_adapter_bug(h: Harness) -> None:
    with pytest.raises(LocalProtocolError):
        h.feed(FinalizeFailed(proc=99, error="x"))
