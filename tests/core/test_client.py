"""`ClientCore` with no I/O: scripted server frames, and a pure link to a real `ServerCore`."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from execproto import ClientCore, ClientState, LocalProtocolError, UnsendableText
from execproto.client_events import (
    CONNECTION_LOST,
    ClientEvent,
    Closed,
    Exited,
    Failure,
    HandshakeFailed,
    HttpBodyDelta,
    Output,
    OutputLost,
    Ready,
    Response,
    ServerMisbehaved,
    SessionLost,
)

# -- a scripted server ---------------------------------------------------------------------------


def sent(core: ClientCore) -> list[dict[str, Any]]:
    return [json.loads(frame) for frame in core.data_to_send()]


def answer(core: ClientCore, call_id: int, result: Any) -> list[ClientEvent]:
    return core.receive(json.dumps({"jsonrpc": "2.0", "id": call_id, "result": result}))


def fail(core: ClientCore, call_id: int, code: int, message: str) -> list[ClientEvent]:
    error = {"code": code, "message": message}
    return core.receive(json.dumps({"id": call_id, "error": error}))


def notify(core: ClientCore, method: str, **params: Any) -> list[ClientEvent]:
    return core.receive(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))


def out(
    core: ClientCore, seq: int, data: bytes, pid: str = "p", stream: str = "stdout"
) -> list[ClientEvent]:
    chunk = base64.b64encode(data).decode()
    return notify(core, "process/output", processId=pid, seq=seq, stream=stream, chunk=chunk)


def read_result(chunks: list[tuple[int, bytes]], next_seq: int, **extra: Any) -> dict[str, Any]:
    result = {
        "chunks": [
            {"seq": s, "stream": "stdout", "chunk": base64.b64encode(d).decode()} for s, d in chunks
        ],
        "nextSeq": next_seq,
        "exited": False,
        "exitCode": None,
        "closed": False,
        "failure": None,
        "sandboxDenied": False,
    }
    result.update(extra)
    return result


def ready(instance: str = "c1") -> ClientCore:
    core = ClientCore(instance, client_name="tests")
    core.connection_made()
    (init,) = sent(core)
    assert init["method"] == "initialize"
    assert init["params"] == {"clientName": "tests", "outputAcks": True}
    events = answer(core, init["id"], {"sessionId": "s1", "environmentInfo": {"cwd": "/"}})
    assert events == [Ready(session_id="s1", resumed=False, environment_info={"cwd": "/"})]
    assert sent(core) == [{"jsonrpc": "2.0", "method": "initialized", "params": {}}]
    return core


def started(pid: str = "p") -> tuple[ClientCore, int]:
    core = ready()
    call = core.start(pid, ["sh"], cwd="/tmp")
    (start,) = sent(core)
    answer(core, start["id"], {"processId": pid, "sandboxType": "none"})
    return core, call


def outputs(events: list[ClientEvent]) -> list[tuple[int, bytes]]:
    return [(e.seq, e.data) for e in events if isinstance(e, Output)]


# -- handshake and calls ---------------------------------------------------------------------------


def test_calls_made_before_the_handshake_wait_for_it() -> None:
    core = ClientCore("c1")
    call = core.request("environment/info")
    core.connection_made()
    (init,) = sent(core)
    answer(core, init["id"], {"sessionId": "s1"})
    initialized, info = sent(core)
    assert initialized["method"] == "initialized"
    assert info == {"jsonrpc": "2.0", "id": call, "method": "environment/info", "params": {}}


def test_answers_are_matched_to_their_calls() -> None:
    core = ready()
    a = core.request("fs/readFile", {"path": "file:///a"})
    b = core.request("fs/readFile", {"path": "file:///b"})
    assert [m["id"] for m in sent(core)] == [a, b]
    assert fail(core, b, -32004, "no such file") == [
        Failure(call_id=b, method="fs/readFile", code=-32004, message="no such file")
    ]
    assert answer(core, a, {"dataBase64": ""}) == [
        Response(call_id=a, method="fs/readFile", result={"dataBase64": ""})
    ]


def test_start_sends_a_file_uri_and_the_given_fields() -> None:
    core = ready()
    core.start("p", ["ls", "-l"], cwd="/tmp/a b", env={"A": "1"}, tty=True, arg0="x",
               env_policy={"inherit": "core"})
    (start,) = sent(core)
    assert start["params"] == {
        "processId": "p", "argv": ["ls", "-l"], "cwd": "file:///tmp/a%20b", "env": {"A": "1"},
        "tty": True, "pipeStdin": False, "arg0": "x", "envPolicy": {"inherit": "core"},
    }
    with pytest.raises(LocalProtocolError):
        core.start("p", ["true"], cwd="/")


def test_writes_carry_fresh_write_ids_unique_to_the_instance() -> None:
    core = ready("abc")
    core.write("p", b"hi")
    core.write("p", b"", close_stdin=True)
    first, second = sent(core)
    assert first["params"] == {"processId": "p", "chunk": "aGk=", "writeId": "abc-1"}
    assert second["params"] == {"processId": "p", "chunk": "", "writeId": "abc-2",
                                "closeStdin": True}


def test_text_the_protocol_cannot_carry_is_refused_locally_naming_it() -> None:
    """An undecodable byte of argv or the environment (a lone surrogate, as os gives it) would
    reach the server as invalid JSON; its answer has no id to match, and the call waited for
    good. It is refused before anything is sent, and the process id stays free."""
    core = ready()
    for argv, env, where in ((["ls", "caf\udce9"], {}, "argv[1]"),
                             (["env"], {"X": "\udcff"}, "env['X']"),
                             (["env"], {"\udcff": "v"}, "env['\\udcff'] (its name)")):
        with pytest.raises(UnsendableText) as refused:
            core.start("p", argv, cwd="/tmp", env=env)
        assert refused.value.where == where and "not UTF-8 text" in str(refused.value)
        assert sent(core) == []
    core.start("p", ["ls", "café"], cwd="/tmp")  # text is fine, and the id was never taken
    assert sent(core)[0]["params"]["argv"] == ["ls", "café"]


def test_an_answer_with_no_id_fails_the_oldest_call_instead_of_being_dropped() -> None:
    core = ready()
    first = core.request("environment/info")
    second = core.request("environment/info")
    sent(core)
    error = {"code": -32600, "message": "failed to parse JSON-RPC message"}
    (failed,) = core.receive(json.dumps({"jsonrpc": "2.0", "id": -1, "error": error}))
    assert isinstance(failed, Failure) and failed.call_id == first and failed.code == -32600
    (done,) = answer(core, second, {})
    assert isinstance(done, Response) and done.call_id == second
    (stray,) = core.receive(json.dumps({"jsonrpc": "2.0", "id": -1, "error": error}))
    assert isinstance(stray, ServerMisbehaved)  # nothing waits: reported, as before


def test_a_failed_start_frees_the_process_id() -> None:
    core = ready()
    call = core.start("p", ["nope"], cwd="/")
    sent(core)
    [failure] = fail(core, call, -32603, "No such file or directory (os error 2)")
    assert isinstance(failure, Failure) and failure.code == -32603
    core.start("p", ["true"], cwd="/")


# -- process events in seq order -------------------------------------------------------------------


def test_output_exit_and_close_in_order() -> None:
    core, _ = started()
    assert out(core, 1, b"a") == [Output(process_id="p", seq=1, stream="stdout", data=b"a")]
    assert notify(core, "process/exited", processId="p", seq=2, exitCode=3) == [
        Exited(process_id="p", exit_code=3)
    ]
    assert outputs(out(core, 3, b"late")) == [(3, b"late")]  # a descendant's, after the exit
    assert notify(core, "process/closed", processId="p", seq=4) == [
        Closed(process_id="p", exit_code=3, failure=None)
    ]


def test_a_repeated_seq_is_delivered_once() -> None:
    core, _ = started()
    out(core, 1, b"a")
    assert out(core, 1, b"a") == []


def test_a_gap_is_read_back_and_what_came_after_it_waits() -> None:
    core, _ = started()
    out(core, 1, b"a")
    assert out(core, 3, b"c") == []  # seq 2 is missing
    (read,) = sent(core)
    assert read["method"] == "process/read"
    assert read["params"] == {"processId": "p", "afterSeq": 1}
    assert out(core, 4, b"d") == []  # still waiting; no second read
    assert sent(core) == []
    events = answer(core, read["id"], read_result([(2, b"b"), (3, b"c")], 4))
    assert outputs(events) == [(2, b"b"), (3, b"c"), (4, b"d")]
    assert outputs(out(core, 5, b"e")) == [(5, b"e")]


def test_a_read_back_places_the_exit_and_close_in_the_seqs_it_skipped() -> None:
    core, _ = started()
    out(core, 1, b"a")
    out(core, 9, b"ignored: the read answers for it")  # a gap: read back from 1
    (read,) = sent(core)
    # 2 output, 3 exited, 4 late output, 5 closed.
    result = read_result([(2, b"b"), (4, b"late")], 6, exited=True, exitCode=0, closed=True,
                         failure="why")
    events = answer(core, read["id"], result)
    assert events == [
        Output(process_id="p", seq=2, stream="stdout", data=b"b"),
        Exited(process_id="p", exit_code=0),
        Output(process_id="p", seq=4, stream="stdout", data=b"late"),
        Closed(process_id="p", exit_code=0, failure="why"),
    ]
    assert out(core, 9, b"x") == []  # the process is done: stray frames are ignored


def test_output_the_server_dropped_is_reported() -> None:
    core, _ = started()
    out(core, 1, b"a")
    out(core, 5, b"e")
    (read,) = sent(core)
    result = read_result([(4, b"d"), (5, b"e")], 6, firstRetainedSeq=4, droppedBytes=2)
    events = answer(core, read["id"], result)
    assert events[0] == OutputLost(process_id="p", after_seq=1, before_seq=4)
    assert outputs(events[1:]) == [(4, b"d"), (5, b"e")]


def test_a_close_implies_the_exit() -> None:
    core, _ = started()
    events = notify(core, "process/closed", processId="p", seq=1)
    assert events == [Exited(process_id="p", exit_code=None),
                      Closed(process_id="p", exit_code=None, failure=None)]


def test_events_of_a_process_that_is_not_tracked_are_ignored() -> None:
    core, _ = started()
    assert out(core, 1, b"x", pid="other") == []
    notify(core, "process/closed", processId="p", seq=1)
    assert notify(core, "process/closed", processId="p", seq=1) == []  # a late repeat


def test_http_body_deltas_are_decoded() -> None:
    core = ready()
    events = notify(core, "http/request/bodyDelta", requestId="r", seq=1, deltaBase64="aGk=",
                    done=True, error=None)
    assert events == [HttpBodyDelta(request_id="r", seq=1, data=b"hi", done=True, error=None)]


@pytest.mark.parametrize(
    "frame",
    [
        "not json",
        "[1]",
        '{"jsonrpc":"2.0","method":"process/output","params":{"processId":"p"}}',
        '{"jsonrpc":"2.0","method":"process/output","params":{"processId":"p","seq":1,'
        '"stream":"stdout","chunk":"!!"}}',
        '{"jsonrpc":"2.0","method":"process/output","params":{"processId":"p","seq":"1",'
        '"stream":"stdout","chunk":""}}',
        '{"jsonrpc":"2.0","method":"what/now","params":{}}',
        '{"jsonrpc":"2.0","id":999,"result":{}}',
        '{"id":-1,"error":{"code":-32600,"message":"failed to parse"}}',
    ],
)
def test_a_frame_the_client_cannot_use_is_reported_and_ignored(frame: str) -> None:
    core, _ = started()
    [event] = core.receive(frame)
    assert isinstance(event, ServerMisbehaved) and event.detail
    assert outputs(out(core, 1, b"still fine")) == [(1, b"still fine")]


@pytest.mark.parametrize(
    "reply",
    [
        {"id": "CALL"},  # neither result nor error
        {"id": "CALL", "error": {"code": "bad", "message": "x"}},
        {"id": "CALL", "error": "no"},
    ],
)
def test_a_malformed_answer_fails_its_call_instead_of_leaving_it_waiting(
    reply: dict[str, Any]
) -> None:
    core = ready()
    call = core.request("fs/getMetadata", {"path": "file:///"})
    sent(core)
    reply["id"] = call
    failure, misbehaved = core.receive(json.dumps(reply))
    assert isinstance(misbehaved, ServerMisbehaved)
    assert isinstance(failure, Failure) and failure.call_id == call
    assert failure.code == -32603 and "malformed" in failure.message


def test_a_malformed_answer_to_initialize_fails_the_handshake() -> None:
    core = ClientCore("c1")
    core.connection_made()
    (init,) = sent(core)
    events = answer(core, init["id"], {"environmentInfo": {}})  # no sessionId
    assert [type(e) for e in events] == [HandshakeFailed, ServerMisbehaved]
    assert core.state is ClientState.DISCONNECTED


# -- reconnecting ----------------------------------------------------------------------------------


def reconnect(core: ClientCore) -> list[dict[str, Any]]:
    """Open a new connection and complete the resume; return what the client sent after it."""
    core.connection_made()
    (init,) = sent(core)
    assert init["params"] == {"clientName": "tests", "resumeSessionId": "s1", "outputAcks": True}
    events = answer(core, init["id"], {"sessionId": "s1", "environmentInfo": {}})
    assert events == [Ready(session_id="s1", resumed=True, environment_info={})]
    initialized, *rest = sent(core)
    assert initialized["method"] == "initialized"
    return rest


def test_a_resume_reads_back_every_unfinished_process_from_its_cursor() -> None:
    core, _ = started("p")
    out(core, 1, b"a")
    out(core, 2, b"b")
    call = core.start("q", ["sh"], cwd="/")
    (start_q,) = sent(core)
    answer(core, start_q["id"], {"processId": "q"})
    core.start("r", ["sh"], cwd="/")  # never answered: it is sent again, not read
    sent(core)
    assert core.connection_lost() == []
    assert core.state is ClientState.DISCONNECTED
    after = reconnect(core)
    assert [(m["method"], m["params"].get("afterSeq")) for m in after] == [
        ("process/read", 2), ("process/read", 0), ("process/start", None)
    ]
    read_p = after[0]
    events = answer(core, read_p["id"], read_result([(2, b"b"), (3, b"c")], 4))
    assert outputs(events) == [(3, b"c")]
    assert call != read_p["id"]


def test_calls_safe_to_repeat_are_sent_again_and_others_fail() -> None:
    core, _ = started()
    write = core.write("p", b"x")
    signal = core.interrupt("p")
    terminate = core.terminate("p")
    sent(core)
    assert core.connection_lost() == [
        Failure(call_id=signal, method="process/signal", code=CONNECTION_LOST,
                message="the connection closed before the answer"),
    ]
    again = reconnect(core)
    assert [m["id"] for m in again if m["method"] != "process/read"] == [write, terminate]
    assert [m["params"].get("writeId") for m in again if m["id"] == write] == ["c1-1"]


def test_a_repeated_start_that_finds_its_process_counts_as_started() -> None:
    core = ready()
    call = core.start("p", ["sh"], cwd="/")
    sent(core)
    core.connection_lost()
    (start,) = reconnect(core)
    assert start["id"] == call
    events = fail(core, call, -32600, "process p already exists")
    assert events == [Response(call_id=call, method="process/start",
                               result={"processId": "p", "sandboxType": "none"})]


def test_a_resume_refused_while_still_attached_can_be_retried() -> None:
    core, _ = started()
    core.connection_lost()
    core.connection_made()
    (init,) = sent(core)
    attached = "session s1 is already attached to another connection"
    events = fail(core, init["id"], -32010, attached)
    assert events == [HandshakeFailed(code=-32010, message=attached, retry=True)]
    assert core.state is ClientState.DISCONNECTED
    reconnect(core)


def test_an_expired_session_is_lost_with_every_waiting_call() -> None:
    core, _ = started()
    call = core.terminate("p")
    sent(core)
    core.connection_lost()
    core.connection_made()
    (init,) = sent(core)
    events = fail(core, init["id"], -32600, "unknown session id s1")
    assert events == [
        SessionLost(message="unknown session id s1"),
        Failure(call_id=call, method="process/terminate", code=CONNECTION_LOST,
                message="the session is lost: unknown session id s1"),
    ]
    assert core.state is ClientState.LOST
    with pytest.raises(LocalProtocolError):
        core.request("environment/info")
    with pytest.raises(LocalProtocolError):
        core.connection_made()
    # What still arrives on that connection is not the core's mistake: it is taken quietly.
    assert out(core, 1, b"late") == []
    core.release("p", 1)
    assert core.connection_lost() == []


def test_a_process_forgotten_while_away_closes_with_a_failure() -> None:
    core, _ = started()
    core.connection_lost()
    (read,) = reconnect(core)
    [exited, closed] = fail(core, read["id"], -32600, "unknown process id p")
    assert exited == Exited(process_id="p", exit_code=None)
    assert isinstance(closed, Closed) and "unknown process id p" in (closed.failure or "")


def test_connection_made_twice_is_a_local_error() -> None:
    core = ready()
    with pytest.raises(LocalProtocolError):
        core.connection_made()


# -- acknowledging output (execproto's extension) --------------------------------------------------


def acking(window: int = 8, *, release_on_delivery: bool = True) -> ClientCore:
    core = ClientCore("c1", client_name="tests", release_on_delivery=release_on_delivery)
    core.connection_made()
    (init,) = sent(core)
    acks = {"bytes": window * 4, "chunks": 100}
    answer(core, init["id"], {"sessionId": "s1", "environmentInfo": {}, "outputAcks": acks})
    sent(core)
    call = core.start("p", ["sh"], cwd="/")
    sent(core)
    answer(core, call, {"processId": "p"})
    return core


def test_output_is_acknowledged_every_quarter_window() -> None:
    core = acking(window=8)  # the server's window is 32 bytes: ack every 8
    out(core, 1, b"12345")
    assert sent(core) == []
    out(core, 2, b"678")
    (ack,) = sent(core)
    assert (ack["method"], ack["params"]) == ("process/ack", {"processId": "p", "seq": 2})
    assert answer(core, ack["id"], {}) == []  # nobody waits for an ack's answer


def test_a_resume_acknowledges_the_cursor_again_before_reading_back() -> None:
    core = acking()
    out(core, 1, b"123")
    core.connection_lost()
    core.connection_made()
    (init,) = sent(core)
    answer(core, init["id"], {"sessionId": "s1", "outputAcks": {"bytes": 32, "chunks": 100}})
    _, ack, read = sent(core)
    assert (ack["method"], ack["params"]) == ("process/ack", {"processId": "p", "seq": 1})
    assert (read["method"], read["params"]) == ("process/read", {"processId": "p", "afterSeq": 1})


def test_output_the_adapter_has_not_released_is_not_acknowledged() -> None:
    # The adapter releases output as its reader takes it: until then the server keeps it, and
    # pauses the process once a window is unacknowledged, so a stalled reader stops only it.
    core = acking(window=8, release_on_delivery=False)
    out(core, 1, b"12345")
    out(core, 2, b"678")
    out(core, 3, b"9abcdefgh")
    assert sent(core) == []
    core.release("p", 1)
    assert sent(core) == []  # 5 bytes: not yet a quarter window
    core.release("p", 3)
    (ack,) = sent(core)
    assert (ack["method"], ack["params"]) == ("process/ack", {"processId": "p", "seq": 3})
    core.release("p", 3)  # again, or for a process the core no longer has: nothing
    core.release("gone", 9)
    assert sent(core) == []


def test_a_resume_acknowledges_what_was_released_not_what_was_delivered() -> None:
    core = acking(window=1, release_on_delivery=False)
    out(core, 1, b"1234")
    out(core, 2, b"5678")
    core.release("p", 1)
    (ack,) = sent(core)
    assert ack["params"] == {"processId": "p", "seq": 1}
    core.connection_lost()
    core.connection_made()
    (init,) = sent(core)
    answer(core, init["id"], {"sessionId": "s1", "outputAcks": {"bytes": 4, "chunks": 100}})
    _, ack, read = sent(core)
    assert ack["params"] == {"processId": "p", "seq": 1}
    assert read["params"] == {"processId": "p", "afterSeq": 2}


def test_the_extensions_a_server_names_are_known() -> None:
    core = ClientCore("c1")
    core.connection_made()
    (init,) = sent(core)
    methods = ["process/ack", "process/resize", 7]
    answer(core, init["id"], {"sessionId": "s1", "execproto": {"methods": methods}})
    assert core.extensions == {"process/ack", "process/resize"}
    call = core.resize("p", 30, 100)
    _, resize = sent(core)
    assert resize == {"jsonrpc": "2.0", "id": call, "method": "process/resize",
                      "params": {"processId": "p", "rows": 30, "cols": 100}}


def test_a_server_that_names_no_extensions_has_none() -> None:
    core = ready()
    assert core.extensions == frozenset()


def test_no_acks_to_a_server_that_does_not_take_them() -> None:
    core, _ = started()
    out(core, 1, b"x" * 100_000)
    assert sent(core) == []


def test_acks_can_be_turned_off() -> None:
    core = ClientCore("c1", acks=False)
    core.connection_made()
    (init,) = sent(core)
    assert "outputAcks" not in init["params"]
