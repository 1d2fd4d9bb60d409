"""Recording every handle() call as JSON Lines, and replaying a recording into a fresh core."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from execproto import (
    AnswerProxy,
    CancelHttp,
    CloseConnection,
    CloseStdin,
    Config,
    ConnectionClosed,
    ConnectionOpened,
    Drain,
    Encoded,
    EndSession,
    Finalize,
    FinalizeFailed,
    FsCompleted,
    Host,
    HttpBodyReceived,
    HttpFinished,
    HttpRequest,
    HttpResponded,
    LocalProtocolError,
    MessageReceived,
    MissingChanged,
    OutputReceived,
    PauseOutput,
    ProcessExited,
    ProcessSpawned,
    ProxyAsked,
    Recorder,
    ReplayResult,
    ResizeTerminal,
    ResumeOutput,
    RpcError,
    RunFs,
    RunHttp,
    Send,
    SendBlocked,
    SendDrained,
    ServerCore,
    Shutdown,
    Signal,
    Spawn,
    SpawnFailed,
    SpawnSpec,
    StdinWritten,
    StreamClosed,
    Tick,
    Unwatch,
    WatchMissing,
    WriteStdin,
    replay,
)
from execproto._netproxy import Question
from execproto._trace import FORMAT, VERSION, from_json, load_header, to_json
from execproto.actions import (
    ACTION_TYPES,
    CloseForward,
    OpenForward,
    PauseForward,
    ResumeForward,
    WriteForward,
)
from execproto.events import (
    EVENT_TYPES,
    ForwardConnected,
    ForwardEnded,
    ForwardFailed,
    ForwardReceived,
    ForwardUnrouted,
    ForwardWritten,
)
from execproto.fs import WriteFile

from .harness import Harness, b64, unb64

# -- expected messages (the one place to update when the core's wording changes) ----------------


def not_a_trace(line: str) -> str:
    return f"not an {FORMAT} v{VERSION} trace: {line[:80]!r}"


# -- helpers ------------------------------------------------------------------------------------


def scripted_session() -> Harness:
    """A session touching most of the core: processes, a long poll, fs, http, flow control."""
    config = Config(session_ttl=5.0, kill_grace=0.5, retention_bytes=64)
    host = Host(environment_info={"shell": {"name": "sh", "path": "/bin/sh"}},
                env={"PATH": "/bin", "API_KEY": "x"})
    h = Harness(config, host)
    h.connect(1)
    h.send(1, "not json")
    h.handshake(1)
    proc = h.start(1, "p", ["sh", "-c", "echo hi"], envPolicy={
        "inherit": "all", "ignoreDefaultExcludes": False,
        "exclude": [], "set": {}, "includeOnly": [],
    })
    read_id = h.request(1, "process/read", {"processId": "p", "waitMs": 2000})
    h.advance(0.25)
    h.output(proc, "stdout", b"hi\n" * 30)
    assert h.response(1, read_id) is not None
    h.feed(SendBlocked(conn=1))
    h.output(proc, "stderr", b"\xff\x00")
    h.feed(SendDrained(conn=1))
    h.call(1, "process/write", {"processId": "p", "chunk": b64(b"x"), "writeId": "w"})
    h.request(1, "fs/readFile", {"path": "file:///etc/hosts"})
    run_fs = h.of_type(RunFs)[-1]
    h.feed(FsCompleted(op=run_fs.op, error=RpcError(-32004, "not found", {"path": "/etc/hosts"})))
    h.request(1, "http/request", {"method": "get", "url": "http://h/", "requestId": "r",
                                  "streamResponse": True})
    run_http = h.of_type(RunHttp)[-1]
    h.feed(HttpResponded(op=run_http.op, status=200, headers=(("a", "1"), ("a", "2"))))
    h.feed(HttpBodyReceived(op=run_http.op, data=b"body"))
    h.call(1, "process/terminate", {"processId": "p"})
    h.advance(1.0)
    h.exit(proc, -9)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    h.disconnect(1)
    h.advance(10.0)
    return h


def steps(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines[1:]]


def with_step(lines: list[str], index: int, step: dict[str, Any]) -> list[str]:
    """``lines`` with step ``index`` (1-based, after the header) replaced."""
    out = list(lines)
    out[index] = json.dumps(step)
    return out


# -- recording ----------------------------------------------------------------------------------


def test_recorder_writes_a_header_then_one_line_per_call() -> None:
    lines: list[str] = []
    config = Config(session_ttl=7.0)
    host = Host(environment_info={"cwd": "file:///"}, env={"A": "1"})
    recorder = Recorder(ServerCore(config, host), lines.append)
    assert len(lines) == 1
    header = json.loads(lines[0])
    assert header == {
        "format": FORMAT,
        "version": VERSION,
        # Tuples as lists; not the base64 encoder, a function and no setting.
        "config": json.loads(json.dumps(attrs.asdict(
            config, filter=lambda field, _: field.name != "b64encode"))),
        "host": {"environment_info": {"cwd": "file:///"}, "env": {"A": "1"},
                 "descriptor_limit": None},
    }
    assert load_header(lines[0]) == (config, host)

    first = recorder.handle(ConnectionOpened(conn=1, session_id="s"), 1.5)
    assert first == []
    actions = recorder.handle(MessageReceived(conn=1, data=b"[]"), 2.0)
    recorder.handle(Tick(), 3.0)
    assert len(lines) == 4
    assert all("\n" not in line for line in lines)
    one, two, three = steps(lines)
    assert one == {"t": 1.5, "event": {"$type": "ConnectionOpened", "conn": 1, "session_id": "s",
                                       "label": "client", "peer": "", "identity": ""},
                   "actions": []}
    assert two["t"] == 2.0
    assert two["event"] == {"$type": "MessageReceived", "conn": 1, "data": {"$bytes": b64(b"[]")}}
    assert two["actions"] == [to_json(a) for a in actions]
    assert two["actions"][0]["$type"] == "Send"
    assert three == {"t": 3.0, "event": {"$type": "Tick"}, "actions": []}


def test_recorder_returns_what_the_core_returns_and_delegates_next_deadline() -> None:
    lines: list[str] = []
    recorder = Recorder(ServerCore(), lines.append)
    plain = ServerCore()
    for event in (ConnectionOpened(conn=1, session_id="s"),
                  MessageReceived(conn=1, data='{"id":1,"method":"initialize","params":'
                                               '{"clientName":"c"}}'),
                  ConnectionClosed(conn=1)):
        assert recorder.handle(event, 0.0) == plain.handle(event, 0.0)
    assert recorder.next_deadline() == plain.next_deadline() == 30.0


def test_a_step_that_raised_is_recorded_and_reraised() -> None:
    lines: list[str] = []
    recorder = Recorder(ServerCore(), lines.append)
    with pytest.raises(LocalProtocolError) as info:
        recorder.handle(MessageReceived(conn=9, data="{}"), 4.0)
    (step,) = steps(lines)
    assert step == {"t": 4.0, "event": {"$type": "MessageReceived", "conn": 9, "data": "{}"},
                    "error": str(info.value)}
    assert "actions" not in step


# -- replay -------------------------------------------------------------------------------------


def test_replay_of_a_recorded_session_is_ok() -> None:
    h = scripted_session()
    result = replay(h.lines)
    assert result == ReplayResult(ok=True, steps=len(h.lines) - 1)
    assert result.step is None and result.expected is None and result.actual is None


def test_replay_accepts_a_text_stream_with_blank_lines() -> None:
    h = scripted_session()
    text = "\n\n".join(h.lines) + "\n\n"
    result = replay(text.splitlines(keepends=True))
    assert result.ok and result.steps == len(h.lines) - 1


def test_replay_of_a_header_only_trace_is_ok() -> None:
    lines: list[str] = []
    Recorder(ServerCore(), lines.append)
    assert replay(lines) == ReplayResult(ok=True, steps=0)


def test_replay_of_a_tampered_action_reports_the_first_divergent_step() -> None:
    h = scripted_session()
    original = steps(h.lines)
    # The first step with a Send action, and a later one: only the first is reported.
    with_sends = [i for i, s in enumerate(original, start=1)
                  if any(a["$type"] == "Send" for a in s.get("actions", []))]
    target, later = with_sends[2], with_sends[-1]
    lines = list(h.lines)
    for index in (later, target):
        step = json.loads(lines[index])
        send = next(a for a in step["actions"] if a["$type"] == "Send")
        send["data"] = {"$bytes": b64(b'{"tampered":true}')}
        lines = with_step(lines, index, step)

    result = replay(lines)
    assert not result.ok
    assert result.step == result.steps == target
    assert result.expected == json.loads(lines[target])["actions"]
    assert result.actual == original[target - 1]["actions"]
    assert result.expected != result.actual


@pytest.mark.parametrize(
    "tamper",
    ["drop", "add", "reorder", "field"],
)
def test_every_kind_of_action_change_is_detected(tamper: str) -> None:
    h = scripted_session()
    original = steps(h.lines)
    index = next(i for i, s in enumerate(original, start=1) if len(s.get("actions", [])) >= 2)
    step = json.loads(h.lines[index])
    if tamper == "drop":
        step["actions"].pop()
    elif tamper == "add":
        step["actions"].append(to_json(Signal(proc=1, signal="KILL")))
    elif tamper == "reorder":
        step["actions"].reverse()
    else:
        step["actions"][0]["conn"] = 99
    result = replay(with_step(h.lines, index, step))
    assert (result.ok, result.step) == (False, index)
    assert result.actual == original[index - 1]["actions"]


def test_a_tampered_time_changes_what_a_tick_does() -> None:
    h = Harness(Config(session_ttl=5.0))
    h.connect(1)
    h.handshake(1)
    h.start(1, "p")
    h.disconnect(1)
    h.advance(6.0)  # the expiry tick at t=5 sends TERM
    index, step = next((i, s) for i, s in enumerate(steps(h.lines), start=1)
                       if s["event"]["$type"] == "Tick")
    assert step["t"] == 5.0 and step["actions"] == [to_json(Signal(proc=1, signal="TERM")),
                                                    to_json(EndSession(session_id="session-1"))]
    step["t"] = 4.0
    result = replay(with_step(h.lines, index, step))
    assert (result.ok, result.step, result.actual) == (False, index, [])


def test_a_tampered_header_config_is_detected_where_it_matters() -> None:
    h = Harness(Config(session_ttl=5.0))
    h.connect(1)
    h.handshake(1)
    h.start(1, "p")
    h.disconnect(1)
    h.advance(6.0)
    header = json.loads(h.lines[0])
    header["config"]["session_ttl"] = 50.0
    lines = [json.dumps(header)] + h.lines[1:]
    result = replay(lines)
    assert not result.ok
    assert steps(h.lines)[result.step - 1]["event"]["$type"] == "Tick"


@pytest.mark.parametrize(
    "header",
    [
        {"format": "something-else", "version": VERSION, "config": {}, "host": {}},
        {"format": FORMAT, "version": VERSION + 1, "config": {}, "host": {}},
        {"version": VERSION},
        [],
    ],
)
def test_a_trace_with_a_foreign_header_is_refused(header: Any) -> None:
    line = json.dumps(header)
    if not isinstance(header, dict):
        with pytest.raises(AttributeError):
            replay([line])
        return
    with pytest.raises(ValueError) as info:
        replay([line])
    assert str(info.value) == not_a_trace(line)


def test_a_step_that_raised_replays_ok() -> None:
    h = Harness()
    h.connect(1)
    h.handshake(1)
    with pytest.raises(LocalProtocolError):
        h.feed(ConnectionOpened(conn=1, session_id="again"))
    with pytest.raises(LocalProtocolError):
        h.feed(FsCompleted(op=77))
    recorded = steps(h.lines)
    assert [("error" in s) for s in recorded[-2:]] == [True, True]
    assert replay(h.lines) == ReplayResult(ok=True, steps=len(recorded))


def test_a_tampered_error_is_reported() -> None:
    h = Harness()
    h.connect(1)
    with pytest.raises(LocalProtocolError) as info:
        h.feed(ConnectionOpened(conn=1, session_id="again"))
    index = len(h.lines) - 1
    step = json.loads(h.lines[index])
    step["error"] = "something else"
    result = replay(with_step(h.lines, index, step))
    assert (result.ok, result.step) == (False, index)
    assert result.expected == {"error": "something else"}
    assert result.actual == {"error": str(info.value)}


def test_a_step_that_now_raises_is_reported_as_an_error() -> None:
    h = Harness()
    h.connect(1)
    h.handshake(1)
    index = len(h.lines) - 1
    step = json.loads(h.lines[index])
    step["event"]["conn"] = 2  # a message on a connection that was never opened
    result = replay(with_step(h.lines, index, step))
    assert (result.ok, result.step, result.expected) == (False, index, [])
    assert set(result.actual) == {"error"} and "2" in result.actual["error"]


def test_a_step_that_raised_but_now_succeeds_is_reported() -> None:
    h = Harness()
    h.connect(1)
    with pytest.raises(LocalProtocolError):
        h.feed(SendBlocked(conn=3))
    index = len(h.lines) - 1
    step = json.loads(h.lines[index])
    step["event"]["conn"] = 1
    result = replay(with_step(h.lines, index, step))
    assert (result.ok, result.step, result.actual) == (False, index, [])


def test_every_core_test_style_harness_trace_replays() -> None:
    h = scripted_session()
    h.assert_replays()


# -- to_json / from_json ------------------------------------------------------------------------

EVENT_SAMPLES: list[Any] = [
    ConnectionOpened(conn=1, session_id="3f2a-uuid"),
    ConnectionOpened(conn=1, session_id="3f2a-uuid", label="websocket 127.0.0.1:1"),
    MessageReceived(conn=2, data=b'{"id":1}\xff'),
    MessageReceived(conn=2, data='{"id":"\ud800 ✓"}'),
    ConnectionClosed(conn=3),
    ProxyAsked(proc=2, ask=7, question=Question(protocol="http", host="example.com", port=80,
                                                method="GET", client="127.0.0.1:40000",
                                                addresses=("93.184.215.14",)),
               wall=1_800_000_000.25),
    SendBlocked(conn=4),
    SendDrained(conn=4),
    ProcessSpawned(proc=5, pid=12345),
    SpawnFailed(proc=6, error="No such file or directory (os error 2)", kind="spawnNotFound"),
    SpawnFailed(proc=6, error="Permission denied"),
    OutputReceived(proc=7, stream="stdout", data=bytes(range(256))),
    OutputReceived(proc=7, stream="pty", data=b""),
    StreamClosed(proc=8, stream="stderr"),
    StdinWritten(proc=8, size=4096),
    ProcessExited(proc=9, returncode=-9),
    FsCompleted(op=10, result={"dataBase64": "aGk=", "n": 1.5, "ok": True, "none": None}),
    FsCompleted(op=10, result=Encoded('{"entries":[],"truncated":false}')),
    FsCompleted(op=10),
    FsCompleted(op=11, error=RpcError(-32004, "not found", {"kind": "x", "list": [1, 2]})),
    FsCompleted(op=11, error=RpcError(-32603, "boom")),
    MissingChanged(watch=3),
    HttpResponded(op=12, status=200, headers=(("a", "1"), ("a", "2")), body=b"\x00body"),
    HttpResponded(op=12, status=204, headers=()),
    HttpBodyReceived(op=13, data=b"delta"),
    HttpFinished(op=14),
    HttpFinished(op=14, error="reset"),
    FinalizeFailed(proc=9, error="hook failed"),
    Shutdown(),
    Drain(),
    Tick(),
    ForwardConnected(stream=1),
    ForwardUnrouted(stream=2, network="none", listening=(8765, 9000)),
    ForwardUnrouted(stream=3, network="unknown"),
    ForwardFailed(stream=1, error="Connection refused (os error 111)"),
    ForwardReceived(stream=1, data=b"\x00\xff"),
    ForwardEnded(stream=1),
    ForwardWritten(stream=1, size=5),
]

ACTION_SAMPLES: list[Any] = [
    Send(conn=1, data=b'{"jsonrpc":"2.0"}'),
    CloseConnection(conn=1, code=1008, reason="policy"),
    EndSession(session_id="session-1"),
    AnswerProxy(ask=7, allow=True),
    AnswerProxy(ask=8, allow=False, refusal=(403, (("x-proxy-error", "blocked-by-denylist"),),
                                             b'{"status":"blocked"}'), socks_code=2),
    Spawn(proc=2, spec=SpawnSpec(argv=("sh", "-c", "x"), arg0=None, cwd="/tmp",
                                 env=(("A", "1"), ("B", "")), tty=True, pipe_stdin=False,
                                 session_id="s", process_id="p")),
    Spawn(proc=3, spec=SpawnSpec(argv=("sh",), arg0=None, cwd="/tmp", env=(), tty=True,
                                 pipe_stdin=False, session_id="s", process_id="q",
                                 terminal_size=(50, 132))),
    WriteStdin(proc=2, data=b"\x04"),
    CloseStdin(proc=2),
    Signal(proc=2, signal="INT"),
    ResizeTerminal(proc=2, rows=50, cols=132),
    PauseOutput(proc=2),
    ResumeOutput(proc=2),
    Finalize(proc=2, status="completed", exit_code=137, timed_out=True),
    Finalize(proc=3, status="failed", exit_code=None, timed_out=False),
    RunFs(op=4, conn=1, request=WriteFile(path="/x", data=b"\xff")),
    RunHttp(op=5, conn=1, request=HttpRequest(method="GET", url="http://h/", headers=(("a", "b"),),
                                      body=None, timeout_ms=100, stream_response=True,
                                      follow_redirects=False)),
    CancelHttp(op=5),
    WatchMissing(op=6, watch=1, missing=("/a", "/b/c"), present="/d"),
    WatchMissing(op=7, watch=2, missing=("/a",), present=None),
    Unwatch(watch=1),
    OpenForward(stream=1, session_id="s", host="127.0.0.1", port=3000),
    OpenForward(stream=2, session_id="s", host="::1", port=3000, route="host"),
    WriteForward(stream=1, data=b"\x00\xff"),
    WriteForward(stream=1, data=b"", eof=True),
    PauseForward(stream=1),
    ResumeForward(stream=1),
    CloseForward(stream=1),
]


def round_trip(value: Any) -> Any:
    return from_json(json.loads(json.dumps(to_json(value))))


def test_samples_cover_every_event_type() -> None:
    assert {type(e) for e in EVENT_SAMPLES} == set(EVENT_TYPES)


def test_samples_cover_every_action_type() -> None:
    assert {type(a) for a in ACTION_SAMPLES} == set(ACTION_TYPES)


@pytest.mark.parametrize("event", EVENT_SAMPLES, ids=lambda e: type(e).__name__)
def test_every_event_type_round_trips(event: Any) -> None:
    back = round_trip(event)
    assert type(back) is type(event)
    assert to_json(back) == to_json(event)
    if not isinstance(event, FsCompleted) or event.error is None:
        # RpcError, being an exception, compares by identity; everything else by value.
        assert back == event
    else:
        assert isinstance(back.error, RpcError)
        assert json.dumps(back.error.to_json()) == json.dumps(event.error.to_json())


@pytest.mark.parametrize("action", ACTION_SAMPLES, ids=lambda a: type(a).__name__)
def test_every_action_type_round_trips(action: Any) -> None:
    back = round_trip(action)
    assert back == action


def test_to_json_forms() -> None:
    assert to_json(b"\x00\xff") == {"$bytes": "AP8="}
    assert to_json(bytearray(b"ab")) == {"$bytes": "YWI="}
    assert to_json(memoryview(b"ab")) == {"$bytes": "YWI="}
    assert to_json((1, [2, (3,)])) == [1, [2, [3]]]
    assert to_json({"k": b"v", "n": None}) == {"k": {"$bytes": "dg=="}, "n": None}
    assert to_json(Tick()) == {"$type": "Tick"}
    assert to_json(RpcError(1, "m")) == {"$type": "RpcError", "code": 1, "message": "m",
                                         "data": None}
    assert to_json("s") == "s" and to_json(1.5) == 1.5 and to_json(None) is None


def test_fields_with_defaults_may_be_absent_from_older_traces() -> None:
    assert from_json({"$type": "ConnectionOpened", "conn": 1, "session_id": "s"}) == (
        ConnectionOpened(conn=1, session_id="s")
    )
    assert from_json({"$type": "SpawnFailed", "proc": 1, "error": "e"}) == SpawnFailed(
        proc=1, error="e"
    )


def test_from_json_forms() -> None:
    assert from_json([1, [2, {"a": [3]}]]) == (1, (2, {"a": (3,)}))
    assert from_json({"plain": {"$bytes": "AP8="}}) == {"plain": b"\x00\xff"}
    error = from_json({"$type": "RpcError", "code": 5, "message": "m", "data": {"x": 1}})
    assert isinstance(error, RpcError) and error.to_json() == {"code": 5, "message": "m",
                                                                "data": {"x": 1}}
    error = from_json({"$type": "RpcError", "code": 5, "message": "m"})
    assert error.data is None


def test_fs_results_with_lists_replay_as_the_same_json() -> None:
    """Lists come back as tuples, which the core encodes exactly as it encoded the lists."""
    h = Harness()
    h.connect(1)
    h.handshake(1)
    h.request(1, "fs/readDirectory", {"path": "file:///tmp"})
    (run,) = h.of_type(RunFs)
    entries = [{"fileName": "a", "isDirectory": False, "isFile": True}]
    h.feed(FsCompleted(op=run.op, result={"entries": entries}))
    h.assert_replays()


def test_recorder_reraises_local_protocol_error_for_a_non_event() -> None:
    lines: list[str] = []
    recorder = Recorder(ServerCore(), lines.append)
    with pytest.raises(LocalProtocolError):
        recorder.handle(object(), 0.0)


# -- redaction ----------------------------------------------------------------------------------

SECRET_OUT = b"the-output-secret\n"
SECRET_IN = b"the-stdin-secret"


def redacted_session() -> Harness:
    h = Harness(Config(retention_bytes=64))
    h.lines.clear()
    h.core = Recorder(ServerCore(Config(retention_bytes=64)), h.lines.append, redact=True)
    h.connect(1)
    h.handshake(1)
    proc = h.start(1, "p", ["cat"], pipeStdin=True)
    h.call(1, "process/write", {"processId": "p", "chunk": b64(SECRET_IN), "writeId": "w"})
    h.send(1, '{"id": 9, "method": "process/write", "params": {"processId": "p", '
              f'"chunk" : "{b64(SECRET_IN)}", "writeId": "v"}}}}')  # spaces, and a str frame
    h.call(1, "process/write", {"processId": "p", "chunk": "not base64!", "writeId": "u"})
    h.call(1, "process/write", {"processId": "p", "chunk": "abc", "writeId": "t"})  # bad padding
    frame = {"id": 10, "method": "process/write",
             "params": {"processId": "p", "chunk": b64(SECRET_IN), "writeId": "s"}}
    h.send(1, json.dumps(frame).encode())  # a bytes frame (a binary websocket message)
    h.output(proc, "stdout", SECRET_OUT * 5)  # past retention: the drop counts the same
    h.call(1, "process/read", {"processId": "p"})
    h.exit(proc, 0)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    return h


def test_a_redacted_trace_holds_no_payload_and_still_replays() -> None:
    h = redacted_session()
    text = "\n".join(h.lines)
    for secret in (SECRET_OUT, SECRET_IN):
        for form in (secret, secret * 5):
            assert b64(form) not in text and form.decode() not in text
    assert b64(b"x" * len(SECRET_IN)) in text  # same length, so replies and drops agree
    assert json.loads(h.lines[0])["redacted"] == [
        "process output", "stdin", "environment values", "secret headers"]
    assert replay(h.lines).ok
    # What the live core did is untouched: the real bytes went to the process and the client.
    assert WriteStdin(proc=1, data=SECRET_IN) in h.actions
    assert any(SECRET_OUT in unb64(m["params"]["chunk"]) for m in h.notifications(1))


def test_a_redacted_trace_hides_credential_headers_both_ways_and_still_replays() -> None:
    h = Harness()
    h.lines.clear()
    h.core = Recorder(ServerCore(Config()), h.lines.append, redact=True)
    h.connect(1)
    h.handshake(1)
    headers = [{"name": "Authorization", "value": "Bearer tok\u00e9n-1"},
               {"value": "k-2", "name": "X-Api-Key"}, {"name": "Accept", "value": "kept/1"}]
    h.request(1, "http/request", {"method": "GET", "url": "http://h/", "requestId": "r",
                                  "headers": headers})
    run_http = h.of_type(RunHttp)[-1]
    assert ("Authorization", "Bearer tok\u00e9n-1") in run_http.request.headers  # live: real
    h.feed(HttpResponded(op=run_http.op, status=200,
                         headers=(("Set-Cookie", "sid=c-3"), ("Server", "kept/2"))))
    text = "\n".join(h.lines)
    for secret in ("tok", "k-2", "c-3"):
        assert secret not in text
    assert "kept/1" in text and "kept/2" in text and "x" * len("Bearer tok\u00e9n-1") in text
    assert replay(h.lines).ok


def test_an_encoded_result_is_answered_as_written_and_replays() -> None:
    h = Harness()
    h.connect(1)
    h.handshake(1)
    msg_id = h.request(1, "fs/walk", {"path": "file:///w", "options": {
        "maxDepth": 1, "maxDirectories": 1, "maxEntries": 1, "followDirectorySymlinks": False}})
    h.feed(FsCompleted(op=h.of_type(RunFs)[-1].op, result=Encoded('{"entries":[ 1 ]}')))
    sent = [a.data for a in h.of_type(Send) if a.conn == 1][-1]
    assert sent == b'{"jsonrpc":"2.0","id":%d,"result":{"entries":[ 1 ]}}' % msg_id
    h.assert_replays()


def test_an_unredacted_trace_keeps_the_payloads() -> None:
    h = scripted_session()
    assert "redacted" not in json.loads(h.lines[0])
    assert b64(b"hi\n" * 30) in "\n".join(h.lines)
