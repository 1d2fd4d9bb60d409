"""`ClientCore`'s ERROR state: a bug of its own stops it; a server's bad frame never does.

A call cut short by a bug may have applied part of a frame (a cursor moved, an event not
reported), so going on would deliver from a state nobody can describe: the core refuses every
later use, naming the bug. A frame the server got wrong is the server's: `ServerMisbehaved`,
and the core goes on as if it had not come.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from execproto import ClientCore, ClientState, LocalProtocolError
from execproto._clientside._client_calls import Request
from execproto.client_events import CONNECTION_LOST, Failure, Response, ServerMisbehaved

from .test_client import answer, out, ready, sent, started


class Bug(Exception):
    """Stands for a mistake in the core's code."""


def broken(*args: object) -> None:
    raise Bug("a bug")


# Every use of a core, each as a call that would succeed on a sound core in state READY.
USES: dict[str, Callable[[ClientCore], object]] = {
    "receive": lambda core: out(core, 9, b"y"),
    "request": lambda core: core.request("environment/info"),
    "start": lambda core: core.start("q", ["true"], cwd="/"),
    "write": lambda core: core.write("p", b"x"),
    "interrupt": lambda core: core.interrupt("p"),
    "terminate": lambda core: core.terminate("p"),
    "resize": lambda core: core.resize("p", 24, 80),
    "release": lambda core: core.release("p", 1),
    "connection_made": lambda core: core.connection_made(),
    "data_to_send": lambda core: core.data_to_send(),
}


def assert_stopped(core: ClientCore, bug: BaseException) -> None:
    assert core.state is ClientState.ERROR and core.error is bug
    for name, use in USES.items():
        with pytest.raises(LocalProtocolError, match="bug of its own: Bug") as refused:
            use(core)
        assert refused.value.__cause__ is bug, name


def test_a_bug_while_receiving_stops_the_core_and_is_not_blamed_on_the_server(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    core, _ = started()
    monkeypatch.setattr(core, "_deliver", broken)
    with pytest.raises(Bug) as raised:
        out(core, 1, b"x")  # a sound frame: the error is the core's, it is not swallowed
    assert_stopped(core, raised.value)


def test_a_bug_while_the_connection_is_lost_stops_the_core(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    core = ready()
    core.request("environment/info")
    sent(core)
    monkeypatch.setattr(Request, "dropped", broken)
    with pytest.raises(Bug) as raised:
        core.connection_lost()
    monkeypatch.undo()
    assert_stopped(core, raised.value)


def test_a_bug_while_releasing_output_stops_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    core = ClientCore("c1", release_on_delivery=False)
    core.connection_made()
    (init,) = sent(core)
    answer(core, init["id"], {"sessionId": "s1", "outputAcks": {"bytes": 4, "chunks": 100}})
    call = core.start("p", ["sh"], cwd="/")
    sent(core)
    answer(core, call, {"processId": "p"})
    out(core, 1, b"12345")
    monkeypatch.setattr(core, "_released", broken)
    with pytest.raises(Bug) as raised:
        core.release("p", 1)
    assert_stopped(core, raised.value)


def test_a_stopped_core_still_ends_its_calls_when_the_connection_goes(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # So an adapter can fail whoever waits, rather than leave them waiting for good.
    core, _ = started()
    signal = core.interrupt("p")
    sent(core)
    monkeypatch.setattr(core, "_deliver", broken)
    with pytest.raises(Bug):
        out(core, 1, b"x")
    assert core.connection_lost() == [
        Failure(call_id=signal, method="process/signal", code=CONNECTION_LOST,
                message="the connection closed before the answer")
    ]
    assert core.state is ClientState.ERROR


# Frames a server may send that the core once took for bugs of its own (an exception escaped,
# or the core stopped), or matched to the wrong call.
@pytest.mark.parametrize(
    "frame",
    [
        pytest.param('{"jsonrpc":"2.0","method":["process/output"],"params":{}}', id="list-method"),
        pytest.param('{"jsonrpc":"2.0","method":{"a":1},"params":{}}', id="object-method"),
        pytest.param("[" * 100_000 + "]" * 100_000, id="nested-past-the-parser"),
        pytest.param('{"jsonrpc":"2.0","id":true,"result":{}}', id="bool-id"),
        pytest.param('{"jsonrpc":"2.0","id":1.0,"result":{}}', id="float-id"),
    ],
)
def test_a_server_frame_never_stops_the_core(frame: str) -> None:
    core = ready()
    call = core.request("environment/info")  # id 2: initialize had 1
    sent(core)
    [misbehaved] = core.receive(frame)
    assert isinstance(misbehaved, ServerMisbehaved) and misbehaved.detail
    assert core.state is ClientState.READY
    # Nothing of the frame was applied: the call still waits for its own answer.
    assert answer(core, call, {"ok": True}) == [
        Response(call_id=call, method="environment/info", result={"ok": True})
    ]


def test_an_answer_with_id_true_is_not_taken_for_call_1() -> None:
    core = ClientCore("c1")
    core.connection_made()
    (init,) = sent(core)
    assert init["id"] == 1
    events: list[Any] = core.receive(json.dumps({"id": True, "result": {"sessionId": "s1"}}))
    assert [type(e) for e in events] == [ServerMisbehaved]
    assert core.state is ClientState.HANDSHAKING
