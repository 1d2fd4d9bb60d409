"""A message that would cost too much is refused for itself; the server goes on for everyone.

Its weight is checked before it is parsed (an array of a million empty objects would take the
best part of a gigabyte to parse), a MemoryError while one request is parsed or handled is that
request's error, and a trace that can no longer be written stops, not the core.
"""

from __future__ import annotations

import pytest

from execproto import Recorder, ServerCore, Tick, _jsonrpc, _server
from execproto._jsonrpc import MAX_VALUES

from .harness import Harness


def _still_serving(h: Harness) -> None:
    assert h.core.error is None
    assert "result" in h.call(1, "environment/info")


def test_a_message_with_too_many_values_is_refused_before_it_is_parsed(h: Harness) -> None:
    h.handshake()
    heavy = "[" + ",".join(["{}"] * (MAX_VALUES + 1)) + "]"
    h.send(1, heavy)
    (answer,) = h.messages(1)[-1:]
    assert answer["id"] == -1 and answer["error"]["code"] == -32600
    assert f"at most {MAX_VALUES} values" in answer["error"]["message"]
    _still_serving(h)


def test_a_memory_error_while_parsing_is_that_messages_error(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.handshake()

    def exhausted(*args: object, **kwargs: object) -> object:
        raise MemoryError

    monkeypatch.setattr(_jsonrpc.json, "loads", exhausted)
    h.send(1, '{"jsonrpc": "2.0", "id": 7, "method": "environment/info"}')
    monkeypatch.undo()  # the harness reads the answers with json.loads too
    assert "out of memory parsing" in h.messages(1)[-1]["error"]["message"]
    _still_serving(h)


def test_a_memory_error_while_handling_is_that_requests_error(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.handshake()
    real = _server.ServerCore._on_request

    def exhausted(self: ServerCore, c: object, msg_id: object, method: str,
                  params: object) -> None:
        if method == "process/write":
            raise MemoryError
        real(self, c, msg_id, method, params)  # type: ignore[arg-type]

    monkeypatch.setattr(_server.ServerCore, "_on_request", exhausted)
    reply = h.call(1, "process/write", {"processId": "p", "chunk": "QQ=="})
    assert reply["error"] == {"code": -32603, "message": "out of memory handling the request"}
    monkeypatch.undo()
    _still_serving(h)


def test_a_trace_that_cannot_be_written_stops_and_the_core_goes_on() -> None:
    written: list[str] = []

    def sink(line: str) -> None:
        if len(written) >= 2:
            raise OSError(28, "No space left on device")
        written.append(line)

    recorder = Recorder(ServerCore(), sink)
    recorder.handle(Tick(), 0.0)
    assert recorder.sink_failure is None
    recorder.handle(Tick(), 1.0)  # this step's line does not fit
    assert isinstance(recorder.sink_failure, OSError)
    assert recorder.handle(Tick(), 2.0) == [] and len(written) == 2
    assert recorder.error is None
