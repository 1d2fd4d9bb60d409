"""JSON-RPC framing, the handshake, params validation and request concurrency.

Every expected error message is spelled once, in the block below (they are the reference
server's, see docs/protocol.md), so a wording change in the core is a one-line change here.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from execproto import (
    CloseConnection,
    Config,
    ConnectionClosed,
    ConnectionOpened,
    FsCompleted,
    Host,
    HttpBodyReceived,
    HttpFinished,
    HttpResponded,
    LocalProtocolError,
    MessageReceived,
    OutputReceived,
    ProcessExited,
    ProcessSpawned,
    RunFs,
    RunHttp,
    Send,
    SendBlocked,
    SendDrained,
    ServerCore,
    Signal,
    Spawn,
    SpawnFailed,
    StreamClosed,
    Tick,
)
from execproto._methods import METHODS as REGISTRY

from .harness import Harness, b64
from .messages import (
    bad_symbol,
    foreign_cwd,
    missing,
    unknown_variant,
    unsupported_scheme,
    wrong,
)

# -- expected wire errors (the one place to update when the core's wording changes) -------------

INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
PROTOCOL_ERROR_CLOSE = 1002  # websocket close code for a peer that broke the protocol

NOT_AN_OBJECT = "expected a JSON-RPC object"
BAD_ID = "data did not match any variant of untagged enum RequestId"
MISSING_METHOD = "missing field `method`"
ALREADY_INITIALIZED = "initialize may only be sent once per connection"
EARLY_INITIALIZED = "received `initialized` notification before `initialize`"
EMPTY_ARGV = "argv must not be empty"
EMPTY_WRITE_ID = "writeId must not be empty"
INVALID_NUMBER = "invalid number"
RELATIVE_URI = "invalid URI: relative URL without a base"
INVALID_PADDING = "Invalid padding"
SIGNAL_MAP = "invalid value: map, expected map with a single key"


def parse_error(detail: str, label: str = "client") -> str:
    return f"failed to parse JSON-RPC message from exec-server {label}: {detail}"


def need_initialize(category: str) -> str:
    return f"client must call initialize before using {category} methods"


def need_initialized(category: str) -> str:
    return f"client must send initialized before using {category} methods"


def method_not_found(method: str) -> str:
    return f"exec-server stub does not implement `{method}` yet"


def unexpected_notification(method: str) -> str:
    return f"unexpected notification: {method}"


def unexpected_response(msg_id: Any) -> str:
    return f"unexpected client response: {msg_id!r}"








INHERIT_VARIANTS = "one of `core`, `all`, `none`"
SIGNAL_VARIANTS = "`interrupt`"

# Valid params for every method a client may call once the handshake is done, and the category
# its handshake errors name: the registry's (copies, since tests build on them).
VALID: dict[str, tuple[str, Any]] = {
    name: (method.category, copy.deepcopy(method.example))
    for name, method in REGISTRY.items() if method.category != "handshake"
}
METHODS = list(VALID)
START: dict[str, Any] = VALID["process/start"][1]
POLICY = {"inherit": "all", "ignoreDefaultExcludes": False, "exclude": [], "set": {},
          "includeOnly": []}


# -- helpers ------------------------------------------------------------------------------------


def fresh(conn: int = 1, host: Host | None = None) -> Harness:
    """A core with one connection open and no handshake yet."""
    h = Harness(host=host)
    h.connect(conn)
    return h


def decoded(actions: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(a.data) for a in actions if isinstance(a, Send)]


def only_reply(actions: list[Any], conn: int = 1) -> dict[str, Any]:
    """The actions of one handle() call are exactly one message to ``conn``; return it."""
    assert len(actions) == 1, actions
    (action,) = actions
    assert isinstance(action, Send) and action.conn == conn, action
    message = json.loads(action.data)
    assert isinstance(message, dict)
    return message


def error(message: dict[str, Any]) -> tuple[Any, int, str]:
    assert "result" not in message, message
    return message["id"], message["error"]["code"], message["error"]["message"]


def works(h: Harness, conn: int = 1) -> None:
    """The connection still answers requests normally."""
    reply = h.call(conn, "environment/info")
    assert "result" in reply, reply


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = dict(base)
    out.update(changes)
    return out


def without(base: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in base.items() if k != key}


def closed_with(actions: list[Any], reason: str, conn: int = 1) -> bool:
    return actions == [CloseConnection(conn=conn, code=PROTOCOL_ERROR_CLOSE, reason=reason)]


# -- framing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        "{not json",
        "",
        "   ",
        b"\xff\xfe\x00garbage",
        '{"id": 1, "method": "environment/info"',  # truncated
        '{"id": 1} trailing',
        "[" * 100_000,  # nesting too deep for the decoder
        '{"id": 1' + "0" * 5000 + ', "method": "environment/info"}',  # integer too long
    ],
    ids=["bad-json", "empty", "blank", "bad-utf8", "truncated", "trailing", "deep", "huge-int"],
)
def test_unparseable_frame_is_answered_with_id_minus_one_and_connection_survives(
    h: Harness, frame: str | bytes
) -> None:
    reply = only_reply(h.send(1, frame))
    msg_id, code, message = error(reply)
    assert (msg_id, code) == (-1, INVALID_REQUEST)
    prefix = parse_error("")
    assert message.startswith(prefix) and len(message) > len(prefix)
    works(h)


def test_parse_errors_name_the_peer_label() -> None:
    h = Harness()
    h.feed(ConnectionOpened(conn=4, session_id="s", label="websocket 127.0.0.1:50312"))
    reply = only_reply(h.send(4, "[]"), conn=4)
    assert error(reply) == (-1, INVALID_REQUEST, parse_error(NOT_AN_OBJECT,
                                                             "websocket 127.0.0.1:50312"))


def test_unparseable_frame_before_initialize_is_answered_and_handshake_still_possible() -> None:
    h = fresh()
    msg_id, code, _ = error(only_reply(h.send(1, "}{")))
    assert (msg_id, code) == (-1, INVALID_REQUEST)
    assert h.handshake(1)["result"]["sessionId"] == "session-1"
    works(h)


@pytest.mark.parametrize("frame", ["[]", '[{"id": 1, "method": "environment/info"}]', "42", "-1.5",
                                   '"environment/info"', "null", "true", "false"])
def test_non_object_frames_are_refused_with_id_minus_one(h: Harness, frame: str) -> None:
    assert error(only_reply(h.send(1, frame))) == (-1, INVALID_REQUEST, parse_error(NOT_AN_OBJECT))
    works(h)


def test_binary_frame_with_a_valid_request_is_accepted(h: Harness) -> None:
    reply = only_reply(h.send(1, b'{"jsonrpc":"2.0","id":9,"method":"environment/info"}'))
    assert reply == {"jsonrpc": "2.0", "id": 9, "result": {}}


@pytest.mark.parametrize(
    "message, detail",
    [
        ({"jsonrpc": "2.0", "id": 5}, MISSING_METHOD),
        ({"jsonrpc": "2.0", "id": "five", "params": {}}, MISSING_METHOD),
        ({"jsonrpc": "2.0", "id": 6, "method": None}, MISSING_METHOD),
        ({"jsonrpc": "2.0"}, MISSING_METHOD),
        ({}, MISSING_METHOD),
        # A result without an id is not a response to anything: it is a message without a method.
        ({"jsonrpc": "2.0", "result": {}}, MISSING_METHOD),
        ({"jsonrpc": "2.0", "id": 7, "method": 42}, wrong("number", "a string")),
        ({"jsonrpc": "2.0", "id": 7, "method": 4.5}, wrong("number", "a string")),
        ({"jsonrpc": "2.0", "id": 8, "method": ["a"]}, wrong("sequence", "a string")),
        ({"jsonrpc": "2.0", "method": {"x": 1}}, wrong("map", "a string")),
        ({"jsonrpc": "2.0", "id": 9, "method": True}, wrong("boolean `true`", "a string")),
        ({"jsonrpc": "2.0", "id": 9, "method": False}, wrong("boolean `false`", "a string")),
    ],
)
def test_missing_or_non_string_method_is_a_parse_error(
    h: Harness, message: dict[str, Any], detail: str
) -> None:
    # Like the reference, even a readable id is not echoed: the frame is not a message.
    assert error(only_reply(h.send(1, message))) == (-1, INVALID_REQUEST, parse_error(detail))
    works(h)


@pytest.mark.parametrize(
    "raw_id",
    ["true", "false", "1.5", "1.0", "-0.0", "1e3", "null", "[1]", '{"a": 1}',
     str(2**63), str(-(2**63) - 1), str(2**70)],
)
def test_ids_that_are_not_strings_or_i64_integers_are_refused_with_id_minus_one(
    h: Harness, raw_id: str
) -> None:
    frame = '{"jsonrpc": "2.0", "id": ' + raw_id + ', "method": "environment/info"}'
    assert error(only_reply(h.send(1, frame))) == (-1, INVALID_REQUEST, parse_error(BAD_ID))
    works(h)


def test_bad_id_on_a_response_shaped_message_is_a_parse_error_not_a_close(h: Harness) -> None:
    frame = {"jsonrpc": "2.0", "id": True, "result": {}}
    assert error(only_reply(h.send(1, frame))) == (-1, INVALID_REQUEST, parse_error(BAD_ID))
    works(h)


@pytest.mark.parametrize(
    "msg_id",
    ["abc", "", "42", "ünïcode ✓", "\U0001f600", 0, -5, 1, 2**63 - 1, -(2**63)],
    ids=repr,
)
def test_string_and_integer_ids_are_echoed_as_given(h: Harness, msg_id: str | int) -> None:
    frame = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "environment/info"})
    action = h.send(1, frame)[0]
    assert isinstance(action, Send)
    action.data.decode("ascii")  # everything we send is ASCII JSON, even an emoji
    reply = json.loads(action.data)
    assert reply["id"] == msg_id and type(reply["id"]) is type(msg_id)
    assert reply["result"] == {}


def test_ids_are_echoed_on_errors_too(h: Harness) -> None:
    reply = only_reply(h.send(1, {"jsonrpc": "2.0", "id": "req-A", "method": "no/such"}))
    assert error(reply) == ("req-A", METHOD_NOT_FOUND, method_not_found("no/such"))


@pytest.mark.parametrize(
    "frame",
    [
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": "x", "result": None},
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "no"}},
        {"id": 3, "result": [1, 2]},
    ],
)
def test_a_response_from_the_client_closes_the_connection(
    h: Harness, frame: dict[str, Any]
) -> None:
    # The server sends no requests, so a response is a confused peer; the reference drops it.
    assert closed_with(h.send(1, frame), unexpected_response(frame["id"]))
    # Until the adapter reports the close, whatever else the peer sends is moot.
    assert h.send(1, {"id": 99, "method": "environment/info"}) == []
    assert h.send(1, "garbage") == []
    assert h.disconnect(1) == []


def test_a_response_before_initialize_closes_the_connection_too() -> None:
    h = fresh()
    assert closed_with(h.send(1, {"jsonrpc": "2.0", "id": 1, "result": {}}),
                       unexpected_response(1))
    assert h.send(1, {"id": 2, "method": "initialize", "params": {"clientName": "c"}}) == []


def test_messages_without_jsonrpc_field_are_accepted() -> None:
    h = fresh()
    init = only_reply(h.send(1, {"id": 1, "method": "initialize", "params": {"clientName": "c"}}))
    assert init["result"]["sessionId"] == "session-1"
    assert h.send(1, {"method": "initialized"}) == []
    reply = only_reply(h.send(1, {"id": 2, "method": "environment/info"}))
    assert reply == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_a_wrong_jsonrpc_version_field_is_not_checked(h: Harness) -> None:
    reply = only_reply(h.send(1, {"jsonrpc": "1.0", "id": 2, "method": "environment/info"}))
    assert reply["result"] == {}


def test_every_outgoing_message_is_ascii_json_with_jsonrpc_2_0() -> None:
    h = fresh()
    h.send(1, "garbage")
    h.request(1, "environment/info")  # before initialize
    h.handshake(1)
    h.request(1, "no/such")
    h.request(1, "process/start", {"processId": 5})
    proc = h.start(1, "p", ["echo", "hi"])
    h.output(proc, "stdout", b"hi\n")
    h.output(proc, "stderr", "ünï".encode())
    read_id = h.request(1, "process/read", {"processId": "p", "afterSeq": 2, "waitMs": 1000})
    h.exit(proc, 0)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    assert h.response(1, read_id) is not None
    h.request(1, "process/read", {"processId": "p"})
    h.request(1, "fs/readFile", {"path": "file:///etc/hostname"})
    (run_fs,) = h.of_type(RunFs)
    h.feed(FsCompleted(op=run_fs.op, result={"dataBase64": b64(b"x")}))
    h.request(1, "http/request", {"method": "GET", "url": "http://h/", "requestId": "r",
                                  "streamResponse": True})
    (run_http,) = h.of_type(RunHttp)
    h.feed(HttpResponded(op=run_http.op, status=200, headers=(("a", "b"),)))
    h.feed(HttpBodyReceived(op=run_http.op, data=b"body"))
    h.feed(HttpFinished(op=run_http.op))

    sends = h.of_type(Send)
    kinds = set()
    for send in sends:
        assert isinstance(send.data, bytes)
        message = json.loads(send.data.decode("ascii"))
        assert message["jsonrpc"] == "2.0", message
        kinds.add(message.get("method") or ("error" if "error" in message else "result"))
    assert kinds == {
        "error",
        "result",
        "process/output",
        "process/exited",
        "process/closed",
        "http/request/bodyDelta",
    }


def test_process_output_notification_is_plain_json(h: Harness) -> None:
    proc = h.start(1, 'we"ird\\id ✓')
    (send,) = h.output(proc, "stdout", b"\x00\xffdata")
    assert json.loads(send.data) == {
        "jsonrpc": "2.0",
        "method": "process/output",
        "params": {"processId": 'we"ird\\id ✓', "stream": "stdout", "seq": 1,
                   "chunk": b64(b"\x00\xffdata")},
    }


# -- the handshake ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_any_request_before_initialize_is_refused(method: str) -> None:
    h = fresh()
    category, params = VALID[method]
    reply = only_reply(h.send(1, {"jsonrpc": "2.0", "id": "pre", "method": method,
                                  "params": params}))
    assert error(reply) == ("pre", INVALID_REQUEST, need_initialize(category))
    assert h.of_type(Spawn) == [] and h.of_type(RunFs) == [] and h.of_type(RunHttp) == []
    h.handshake(1)
    works(h)


def test_params_are_checked_before_the_handshake() -> None:
    h = fresh()
    reply = only_reply(h.send(1, {"id": "a", "method": "process/read", "params": {}}))
    assert error(reply) == ("a", INVALID_PARAMS, missing("processId"))
    reply = only_reply(h.send(1, {"id": "b", "method": "fs/readFile", "params": {"path": "/x"}}))
    assert error(reply) == ("b", INVALID_PARAMS, RELATIVE_URI)
    h.call(1, "initialize", {"clientName": "c"})
    reply = only_reply(h.send(1, {"id": "c", "method": "process/start", "params": None}))
    assert error(reply) == ("c", INVALID_PARAMS, wrong("null", "struct WireExecParams"))


def test_unknown_method_is_method_not_found_in_every_state() -> None:
    h = fresh()
    reply = only_reply(h.send(1, {"id": "x", "method": "no/such"}))
    assert error(reply) == ("x", METHOD_NOT_FOUND, method_not_found("no/such"))
    h.call(1, "initialize", {"clientName": "c"})
    reply = only_reply(h.send(1, {"id": "y", "method": "no/such"}))
    assert error(reply) == ("y", METHOD_NOT_FOUND, method_not_found("no/such"))


def test_initialized_as_a_request_is_method_not_found() -> None:
    h = fresh()
    h.call(1, "initialize", {"clientName": "c"})
    reply = only_reply(h.send(1, {"id": "i", "method": "initialized", "params": {}}))
    assert error(reply) == ("i", METHOD_NOT_FOUND, method_not_found("initialized"))
    # It did not complete the handshake.
    reply = only_reply(h.send(1, {"id": "j", "method": "environment/info"}))
    assert error(reply) == ("j", INVALID_REQUEST, need_initialized("environment info"))


def test_initialized_before_initialize_closes_the_connection() -> None:
    h = fresh()
    assert closed_with(h.send(1, {"jsonrpc": "2.0", "method": "initialized"}), EARLY_INITIALIZED)
    assert h.send(1, {"id": 1, "method": "initialize", "params": {"clientName": "c"}}) == []


@pytest.mark.parametrize("method", METHODS + ["no/such", "$/cancelRequest", "initialize"])
def test_other_notifications_before_initialize_close_the_connection(method: str) -> None:
    h = fresh()
    params = VALID.get(method, (None, {"clientName": "c"}))[1]
    actions = h.send(1, {"jsonrpc": "2.0", "method": method, "params": params})
    assert closed_with(actions, unexpected_notification(method))
    assert h.of_type(Spawn) == [] and h.of_type(RunFs) == []


@pytest.mark.parametrize("method", METHODS)
def test_methods_between_initialize_and_initialized_are_refused(method: str) -> None:
    h = fresh()
    h.call(1, "initialize", {"clientName": "c"})
    category, params = VALID[method]
    reply = only_reply(h.send(1, {"jsonrpc": "2.0", "id": "m", "method": method,
                                  "params": params}))
    assert error(reply) == ("m", INVALID_REQUEST, need_initialized(category))
    assert h.send(1, {"jsonrpc": "2.0", "method": "initialized", "params": {}}) == []
    works(h)


def test_second_initialize_is_refused_while_initializing_and_when_ready() -> None:
    h = fresh()
    h.call(1, "initialize", {"clientName": "c"})
    again = only_reply(h.send(1, {"id": 10, "method": "initialize", "params": {"clientName": "c"}}))
    assert error(again) == (10, INVALID_REQUEST, ALREADY_INITIALIZED)
    h.send(1, {"method": "initialized"})
    again = only_reply(h.send(1, {"id": 11, "method": "initialize", "params": {"clientName": "c"}}))
    assert error(again) == (11, INVALID_REQUEST, ALREADY_INITIALIZED)
    # Even a resume attempt, or params that would be invalid, get the same answer.
    again = only_reply(
        h.send(1, {"id": 12, "method": "initialize",
                   "params": {"clientName": "c", "resumeSessionId": "session-1"}})
    )
    assert error(again) == (12, INVALID_REQUEST, ALREADY_INITIALIZED)
    again = only_reply(h.send(1, {"id": 13, "method": "initialize", "params": 5}))
    assert error(again) == (13, INVALID_REQUEST, ALREADY_INITIALIZED)
    works(h)


def test_initialized_sent_twice_is_harmless(h: Harness) -> None:
    assert h.send(1, {"jsonrpc": "2.0", "method": "initialized", "params": {}}) == []
    works(h)


def test_initialize_result_has_session_id_and_environment_info() -> None:
    info = {"shell": {"name": "bash", "path": "/bin/bash"}, "cwd": "file:///home/u", "os": "linux"}
    # And execproto's extension methods, in a field the Codex client ignores.
    ours = {"methods": ["process/ack", "process/resize", "session/end", "forward/open",
                        "forward/write", "forward/ack", "forward/close"]}
    h = fresh(host=Host(environment_info=info))
    h.feed(ConnectionOpened(conn=2, session_id="0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))
    assert h.call(1, "initialize", {"clientName": "c"}) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"sessionId": "session-1", "environmentInfo": info, "execproto": ours},
    }
    reply = h.call(2, "initialize", {"clientName": "other", "resumeSessionId": None})
    assert reply["result"] == {
        "sessionId": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        "environmentInfo": info,
        "execproto": ours,
    }


@pytest.mark.parametrize(
    "params, expected",
    [
        (None, wrong("null", "struct InitializeParams")),
        ({}, missing("clientName")),
        ({"clientName": None}, wrong("null", "a string")),
        ({"clientName": 5}, wrong("number", "a string")),
        ({"clientName": "c", "resumeSessionId": 5}, wrong("number", "a string")),
        ({"clientName": "c", "resumeSessionId": ["s"]}, wrong("sequence", "a string")),
        ([], wrong("sequence", "struct InitializeParams")),
        ("c", wrong('string "c"', "struct InitializeParams")),
    ],
)
def test_initialize_params_are_validated_and_a_failure_leaves_the_connection_new(
    params: Any, expected: str
) -> None:
    h = fresh()
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": "i", "method": "initialize"}
    if params is not None:
        message["params"] = params
    assert error(only_reply(h.send(1, message))) == ("i", INVALID_PARAMS, expected)
    assert error(h.call(1, "environment/info")) == (1, INVALID_REQUEST,
                                                    need_initialize("environment info"))
    assert h.handshake(1)["result"]["sessionId"] == "session-1"


def test_initialize_ignores_unknown_fields() -> None:
    h = fresh()
    reply = h.call(1, "initialize", {"clientName": "c", "capabilities": {"x": 1}})
    assert reply["result"]["sessionId"] == "session-1"


@pytest.mark.parametrize("method", METHODS + ["no/such", "$/cancelRequest", "initialize"])
def test_notifications_other_than_initialized_close_the_connection(h: Harness, method: str) -> None:
    proc = h.start(1, "running")
    params = VALID.get(method, (None, {"clientName": "c"}))[1]
    actions = h.send(1, {"jsonrpc": "2.0", "method": method, "params": params})
    assert closed_with(actions, unexpected_notification(method))
    # Nothing was acted on, and what follows on the closing connection is ignored.
    assert len(h.of_type(Spawn)) == 1 and h.of_type(RunFs) == [] and h.of_type(RunHttp) == []
    assert h.send(1, {"id": "late", "method": "environment/info"}) == []
    # The process is not harmed: the session detaches once the adapter closes the connection.
    assert h.disconnect(1) == []
    assert h.output(proc, "stdout", b"x") == []


# -- params validation of the process methods --------------------------------------------------

START_CASES = [
    (None, wrong("null", "struct WireExecParams")),
    ([], wrong("sequence", "struct WireExecParams")),
    ("p", wrong('string "p"', "struct WireExecParams")),
    (5, wrong("number", "struct WireExecParams")),
    (without(START, "processId"), missing("processId")),
    (with_(START, processId=None), wrong("null", "a string")),
    (with_(START, processId=5), wrong("number", "a string")),
    (without(START, "argv"), missing("argv")),
    (with_(START, argv=[]), EMPTY_ARGV),
    (with_(START, argv="sh"), wrong('string "sh"', "a sequence")),
    (with_(START, argv=["sh", 1]), wrong("number", "a string")),
    (with_(START, argv=[None]), wrong("null", "a string")),
    (with_(START, argv={"0": "sh"}), wrong("map", "a sequence")),
    (with_(START, arg0=5), wrong("number", "a string")),
    (without(START, "cwd"), missing("cwd")),
    (with_(START, cwd=5), wrong("number", "a string")),
    (with_(START, cwd="/tmp"), RELATIVE_URI),
    (with_(START, cwd=""), RELATIVE_URI),
    (with_(START, cwd="http://h/tmp"), unsupported_scheme("http")),
    (with_(START, cwd="file://otherhost/tmp"), foreign_cwd("file://otherhost/tmp")),
    (with_(START, cwd="file://localhost:22/tmp"), foreign_cwd("file://localhost:22/tmp")),
    (with_(START, cwd="file:///C:/Users"), foreign_cwd("file:///C:/Users")),
    (with_(START, cwd="file:///tmp/%00x"), foreign_cwd("file:///tmp/%00x")),
    (without(START, "env"), missing("env")),
    (with_(START, env=[]), wrong("sequence", "a map")),
    (with_(START, env={"A": 1}), wrong("number", "a string")),
    (with_(START, env={"A": None}), wrong("null", "a string")),
    (without(START, "tty"), missing("tty")),
    (with_(START, tty="yes"), wrong('string "yes"', "a boolean")),
    (with_(START, tty=1), wrong("number", "a boolean")),
    (with_(START, tty=None), wrong("null", "a boolean")),
    (with_(START, pipeStdin=0), wrong("number", "a boolean")),
    (with_(START, envPolicy="all"), wrong('string "all"', "struct ExecEnvPolicy")),
    (with_(START, envPolicy=[]), wrong("sequence", "struct ExecEnvPolicy")),
    (with_(START, envPolicy={}), missing("inherit")),
    (with_(START, envPolicy=with_(POLICY, inherit="some")),
     unknown_variant("some", INHERIT_VARIANTS)),
    (with_(START, envPolicy=with_(POLICY, inherit="ALL")),
     unknown_variant("ALL", INHERIT_VARIANTS)),
    (with_(START, envPolicy=with_(POLICY, inherit=1)), wrong("number", "a string")),
    (with_(START, envPolicy=without(POLICY, "ignoreDefaultExcludes")),
     missing("ignoreDefaultExcludes")),
    (with_(START, envPolicy=with_(POLICY, ignoreDefaultExcludes="no")),
     wrong('string "no"', "a boolean")),
    (with_(START, envPolicy=without(POLICY, "exclude")), missing("exclude")),
    (with_(START, envPolicy=with_(POLICY, exclude="X")), wrong('string "X"', "a sequence")),
    (with_(START, envPolicy=without(POLICY, "set")), missing("set")),
    (with_(START, envPolicy=with_(POLICY, set={"A": 1})), wrong("number", "a string")),
    (with_(START, envPolicy=without(POLICY, "includeOnly")), missing("includeOnly")),
    (with_(START, envPolicy=with_(POLICY, includeOnly=[1])), wrong("number", "a string")),
]

READ = {"processId": "p"}
READ_CASES = [
    (None, wrong("null", "struct ReadParams")),
    ([1], wrong("sequence", "struct ReadParams")),
    ({}, missing("processId")),
    ({"processId": 1}, wrong("number", "a string")),
    (with_(READ, afterSeq=-1), INVALID_NUMBER),
    (with_(READ, afterSeq=1.5), INVALID_NUMBER),
    (with_(READ, afterSeq=1.0), INVALID_NUMBER),
    (with_(READ, afterSeq=2**64), INVALID_NUMBER),
    (with_(READ, afterSeq=True), wrong("boolean `true`", "u64")),
    (with_(READ, afterSeq="1"), wrong('string "1"', "u64")),
    (with_(READ, afterSeq=[]), wrong("sequence", "u64")),
    (with_(READ, maxBytes=-1), INVALID_NUMBER),
    (with_(READ, maxBytes=1.0), INVALID_NUMBER),
    (with_(READ, waitMs=-5), INVALID_NUMBER),
    (with_(READ, waitMs="10"), wrong('string "10"', "u64")),
]

WRITE = {"processId": "p", "chunk": b64(b"data"), "writeId": "w1"}
WRITE_CASES = [
    (None, wrong("null", "struct WriteParams")),
    ("x", wrong('string "x"', "struct WriteParams")),
    (without(WRITE, "chunk"), missing("chunk")),
    (with_(WRITE, chunk=5), wrong("number", "a string")),
    (with_(WRITE, chunk="!!!!"), bad_symbol(33, 0)),
    (with_(WRITE, chunk="QQ"), INVALID_PADDING),
    (with_(WRITE, chunk="QQ==\n"), bad_symbol(61, 2)),  # padding not at the end
    (with_(WRITE, chunk="QUJD\n"), bad_symbol(10, 4)),
    (with_(WRITE, chunk="Q==="), bad_symbol(61, 1)),
    (with_(WRITE, chunk="QQ=A"), bad_symbol(61, 2)),
    (with_(WRITE, chunk="ü"), bad_symbol(195, 0)),
    (without(WRITE, "processId"), missing("processId")),
    (without(WRITE, "writeId"), missing("writeId")),
    (with_(WRITE, writeId=""), EMPTY_WRITE_ID),
    (with_(WRITE, writeId=7), wrong("number", "a string")),
    (with_(WRITE, closeStdin="yes"), wrong('string "yes"', "a boolean")),
]

SIGNAL = {"processId": "p", "signal": "interrupt"}
SIGNAL_CASES = [
    (None, wrong("null", "struct SignalParams")),
    (without(SIGNAL, "signal"), missing("signal")),
    (with_(SIGNAL, signal="kill"), unknown_variant("kill", SIGNAL_VARIANTS)),
    (with_(SIGNAL, signal="INT"), unknown_variant("INT", SIGNAL_VARIANTS)),
    (with_(SIGNAL, signal="terminate"), unknown_variant("terminate", SIGNAL_VARIANTS)),
    (with_(SIGNAL, signal={"kill": None}), unknown_variant("kill", SIGNAL_VARIANTS)),
    (with_(SIGNAL, signal={}), SIGNAL_MAP),
    (with_(SIGNAL, signal={"interrupt": None, "kill": None}), SIGNAL_MAP),
    (with_(SIGNAL, signal=2), wrong("number", "string or map")),
    (with_(SIGNAL, signal=None), wrong("null", "string or map")),
    (without(SIGNAL, "processId"), missing("processId")),
]

TERMINATE_CASES = [
    (None, wrong("null", "struct TerminateParams")),
    ({}, missing("processId")),
    ({"processId": 5}, wrong("number", "a string")),
    (["p"], wrong("sequence", "struct TerminateParams")),
]

INFO_CASES = [
    ("x", wrong('string "x"', "unit")),
    ([], wrong("sequence", "unit")),
    (3, wrong("number", "unit")),
]

PARAM_CASES = (
    [("process/start", p, m) for p, m in START_CASES]
    + [("process/read", p, m) for p, m in READ_CASES]
    + [("process/write", p, m) for p, m in WRITE_CASES]
    + [("process/signal", p, m) for p, m in SIGNAL_CASES]
    + [("process/terminate", p, m) for p, m in TERMINATE_CASES]
    + [("environment/info", p, m) for p, m in INFO_CASES]
)


@pytest.mark.parametrize("method, params, expected", PARAM_CASES)
def test_params_are_validated(h: Harness, method: str, params: Any, expected: str) -> None:
    proc = h.start(1, "p")  # so a valid processId would find a running process
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": "bad", "method": method}
    if params is not None:
        message["params"] = params
    # Exactly one action: the error. No Spawn, WriteStdin, Signal, nothing else.
    assert error(only_reply(h.send(1, message))) == ("bad", INVALID_PARAMS, expected)
    # The process is untouched and the connection keeps working.
    h.output(proc, "stdout", b"x")
    reply = h.call(1, "process/read", {"processId": "p"})
    assert [c["seq"] for c in reply["result"]["chunks"]] == [1]


def test_valid_variants_of_the_fields_validated_above_are_accepted(h: Harness) -> None:
    """The valid side of each edge: the refusals above are not over-broad."""
    ok = [
        with_(START, processId="a", cwd="file://localhost/tmp"),
        with_(START, processId="b", cwd="FILE:///tmp"),
        with_(START, processId="c", cwd="file:/tmp"),
        with_(START, processId="d", arg0=None, pipeStdin=True, tty=True),
        with_(START, processId="e", envPolicy=POLICY),
        with_(START, processId="f", envPolicy=with_(POLICY, inherit="none"), extra="ignored"),
        with_(START, processId="g", pipeStdin=None, envPolicy=None),
        with_(START, processId=""),
    ]
    for params in ok:
        reply = h.send(1, {"id": params["processId"] or "empty", "method": "process/start",
                           "params": params})
        assert [type(a) for a in reply] == [Spawn], reply
    proc = h.start(1, "p")
    h.output(proc, "stdout", b"x")
    reads: list[dict[str, Any]] = [
        {"processId": "p", "afterSeq": 0, "maxBytes": 0, "waitMs": 0},
        {"processId": "p", "afterSeq": 2**64 - 1},
        {"processId": "p", "afterSeq": None, "maxBytes": None, "waitMs": None},
    ]
    for read in reads:
        assert "result" in h.call(1, "process/read", read)
    for write in [with_(WRITE, chunk=""), with_(WRITE, writeId="w2", chunk="QQ=="),
                  with_(WRITE, writeId="w3", chunk="QUI=", closeStdin=None)]:
        assert h.call(1, "process/write", write)["result"] == {"status": "stdinClosed"}
    for signal in ("interrupt", {"interrupt": None}, {"interrupt": 1}):
        assert h.call(1, "process/signal", {"processId": "p", "signal": signal})["result"] == {}
    assert h.of_type(Signal) == [Signal(proc=proc, signal="INT")] * 3
    for info in (None, {}):
        assert h.call(1, "environment/info", info)["result"] == {}


# -- concurrency --------------------------------------------------------------------------------


def request_actions(h: Harness, conn: int, msg_id: str, method: str, params: Any) -> list[Any]:
    return h.send(conn, {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})


def test_a_pending_long_poll_read_does_not_delay_later_requests(h: Harness) -> None:
    proc = h.start(1, "p", pipeStdin=True)
    other = h.start(1, "q")
    assert request_actions(h, 1, "slow", "process/read", {"processId": "p", "waitMs": 60_000}) == []
    assert request_actions(
        h, 1, "slow2", "process/read", {"processId": "q", "waitMs": 60_000}) == []

    # Each later request is answered in the very handle() call it arrived in.
    info = only_reply(request_actions(h, 1, "info", "environment/info", {}))
    assert info["id"] == "info"
    write = request_actions(h, 1, "w", "process/write", {"processId": "p", "chunk": b64(b"in"),
                                                          "writeId": "1"})
    assert [m["id"] for m in decoded(write)] == ["w"]
    signal = request_actions(h, 1, "s", "process/signal", {"processId": "p", "signal": "interrupt"})
    assert Signal(proc=proc, signal="INT") in signal
    assert [m["id"] for m in decoded(signal)] == ["s"]
    read_now = only_reply(request_actions(h, 1, "fast", "process/read", {"processId": "p"}))
    assert read_now["id"] == "fast" and read_now["result"]["chunks"] == []
    fs = request_actions(h, 1, "fs", "fs/getMetadata", {"path": "file:///tmp"})
    assert [type(a) for a in fs] == [RunFs]
    bad = only_reply(request_actions(h, 1, "bad", "no/such", {}))
    assert bad["id"] == "bad"
    start = request_actions(h, 1, "start", "process/start", with_(START, processId="r"))
    assert [type(a) for a in start] == [Spawn]
    spawned = h.feed(ProcessSpawned(proc=start[0].proc, pid=4242))
    assert [m["id"] for m in decoded(spawned)] == ["start"]

    assert h.response(1, "slow") is None and h.response(1, "slow2") is None
    # The long poll is answered when output arrives, in the same call as the notification.
    actions = h.output(proc, "stdout", b"late")
    messages = decoded(actions)
    assert [m.get("method") or m["id"] for m in messages] == ["process/output", "slow"]
    assert h.response(1, "slow2") is None
    h.output(other, "stderr", b"q")
    assert h.response(1, "slow2")["result"]["chunks"][0]["stream"] == "stderr"


def test_two_long_polls_on_one_process_are_both_answered(h: Harness) -> None:
    proc = h.start(1, "p")
    request_actions(h, 1, "a", "process/read", {"processId": "p", "waitMs": 1000})
    request_actions(h, 1, "b", "process/read", {"processId": "p", "waitMs": 2000, "maxBytes": 1})
    actions = h.output(proc, "stdout", b"xy")
    assert sorted(m.get("id", "") for m in decoded(actions)) == ["", "a", "b"]
    h.advance(5)  # their deadlines no longer matter
    assert len([m for m in h.messages(1) if m.get("id") in ("a", "b")]) == 2


def test_a_long_poll_that_times_out_is_answered_empty_at_its_deadline(h: Harness) -> None:
    h.start(1, "p")
    request_actions(h, 1, "a", "process/read", {"processId": "p", "waitMs": 1500})
    assert h.core.next_deadline() == pytest.approx(1.5)
    assert h.advance(1.4) == []
    (send,) = h.advance(0.2)
    reply = json.loads(send.data)
    assert reply["id"] == "a" and reply["result"]["chunks"] == []
    assert reply["result"]["nextSeq"] == 1 and reply["result"]["exited"] is False
    assert h.core.next_deadline() is None


# -- adapter mistakes ---------------------------------------------------------------------------


def test_message_on_an_unknown_connection_is_a_local_protocol_error() -> None:
    core = ServerCore()
    with pytest.raises(LocalProtocolError):
        core.handle(MessageReceived(conn=1, data="{}"), 0.0)


@pytest.mark.parametrize(
    "event",
    [
        MessageReceived(conn=7, data="{}"),
        ConnectionClosed(conn=7),
        SendBlocked(conn=7),
        SendDrained(conn=7),
    ],
)
def test_events_naming_a_connection_that_is_not_open_raise(h: Harness, event: Any) -> None:
    with pytest.raises(LocalProtocolError, match="7"):
        h.core.core.handle(event, 0.0)


def test_events_on_a_closed_connection_raise(h: Harness) -> None:
    h.disconnect(1)
    with pytest.raises(LocalProtocolError):
        h.core.core.handle(MessageReceived(conn=1, data="{}"), 0.0)
    with pytest.raises(LocalProtocolError):
        h.core.core.handle(ConnectionClosed(conn=1), 0.0)


def test_connection_opened_twice_raises() -> None:
    core = ServerCore()
    core.handle(ConnectionOpened(conn=1, session_id="s1"), 0.0)
    with pytest.raises(LocalProtocolError):
        core.handle(ConnectionOpened(conn=1, session_id="s2"), 0.0)


def test_reopening_a_connection_after_its_close_is_fine() -> None:
    core = ServerCore()
    core.handle(ConnectionOpened(conn=1, session_id="s1"), 0.0)
    core.handle(ConnectionClosed(conn=1), 0.0)
    assert core.handle(ConnectionOpened(conn=1, session_id="s3"), 0.0) == []


def test_a_session_id_minted_twice_is_a_local_protocol_error() -> None:
    h = fresh()
    h.handshake(1)
    h.feed(ConnectionOpened(conn=2, session_id="session-1"))  # the adapter reused an id
    with pytest.raises(LocalProtocolError, match="session-1"):
        h.request(2, "initialize", {"clientName": "c"})


@pytest.mark.parametrize(
    "thing",
    [object(), None, "Tick", {"conn": 1}, Send(conn=1, data=b"{}"), Tick, ConnectionOpened],
    ids=["object", "None", "str", "dict", "action", "class", "event-class"],
)
def test_an_object_that_is_not_an_event_raises(thing: Any) -> None:
    core = ServerCore()
    with pytest.raises(LocalProtocolError, match="not an event"):
        core.handle(thing, 0.0)


@pytest.mark.parametrize(
    "event",
    [
        ProcessSpawned(proc=99, pid=1),
        SpawnFailed(proc=99, error="x"),
        OutputReceived(proc=99, stream="stdout", data=b"x"),
        StreamClosed(proc=99, stream="stdout"),
        ProcessExited(proc=99, returncode=0),
        ProcessSpawned(proc=0, pid=1),
        FsCompleted(op=99),
        HttpResponded(op=99, status=200, headers=()),
        HttpBodyReceived(op=99, data=b""),
        HttpFinished(op=99),
        HttpFinished(op=0),
    ],
)
def test_events_for_handles_never_issued_raise(h: Harness, event: Any) -> None:
    h.start(1, "p")
    with pytest.raises(LocalProtocolError, match="never issued"):
        h.core.core.handle(event, 0.0)


def test_tick_is_harmless_at_any_time() -> None:
    core = ServerCore(Config(), Host())
    assert core.next_deadline() is None
    assert core.handle(Tick(), 0.0) == []
    assert core.handle(Tick(), 1e9) == []
    h = fresh()
    h.handshake(1)
    h.start(1, "p")
    for t in (0.0, 0.5, 100.0):
        h.now = t
        assert h.feed(Tick()) == []


def test_handle_returns_a_fresh_list_per_call(h: Harness) -> None:
    first = h.send(1, {"id": 1, "method": "environment/info"})
    second = h.send(1, {"id": 2, "method": "environment/info"})
    assert first is not second and len(first) == 1 and len(second) == 1


def test_one_late_tick_past_an_abandon_and_a_read_deadline_does_not_crash(h: Harness) -> None:
    proc = h.start(1, "p")
    h.call(1, "process/terminate", {"processId": "p"})
    h.exit(proc, -15)  # pipes still held: abandon due at 1.0
    h.now = 0.5
    read_id = h.request(1, "process/read", {"processId": "p", "afterSeq": 1, "waitMs": 600})
    h.now = 2.0  # the adapter was busy; one Tick covers both deadlines (1.0 and 1.1)
    h.feed(Tick())
    reply = h.response(1, read_id)
    assert reply is not None and reply["result"]["closed"] is True


def test_a_cwd_with_a_malformed_ipv6_host_is_invalid_params(h: Harness) -> None:
    reply = only_reply(h.send(1, {"id": "c", "method": "process/start",
                                  "params": with_(START, cwd="file://[/tmp")}))
    assert error(reply)[:2] == ("c", INVALID_PARAMS)
