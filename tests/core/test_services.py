"""``environment/info``, ``fs/*`` and ``http/request``: validation, actions, answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from execproto import (
    CancelHttp,
    Config,
    FsCompleted,
    Host,
    HttpBodyReceived,
    HttpFinished,
    HttpRequest,
    HttpResponded,
    LocalProtocolError,
    PathRule,
    Policy,
    RpcError,
    RunFs,
    RunHttp,
    Send,
)
from execproto import fs as fs_requests
from execproto.fs import Close, FsRequest, Open, ReadBlock

from .harness import Harness, b64, unb64
from .messages import (
    bad_symbol,
    foreign_path,
    missing,
    unknown_variant,
    unsupported_scheme,
    wrong,
)

# -- expected wire errors (the one place to update when the core's wording changes) -------------

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
NOT_FOUND = -32004
MAX_BLOCK = 1 << 20

RELATIVE_URI = "invalid URI: relative URL without a base"
HANDLE_ID_TOO_LONG = "file handle ID must not exceed 32 bytes"
BAD_LEN = f"file read block length must be between 1 and {MAX_BLOCK}"
TOO_MANY_HANDLES = "too many open file handles: at most 128"
INVALID_NUMBER = "invalid number"
BAD_HTTP_METHOD = "http/request method is invalid: invalid HTTP method"
RELATIVE_HTTP_URL = "http/request url is invalid: relative URL without a base"
REDIRECT_VARIANTS = "`follow` or `stop`"








def bad_write_data(why: str) -> str:
    return f"fs/writeFile requires valid base64 dataBase64: {why}"


def handle_exists(handle_id: str) -> str:
    return f"file handle `{handle_id}` already exists"


def unknown_handle(handle_id: str) -> str:
    return f"unknown file handle `{handle_id}`"


def unsupported_url(url: str) -> str:
    return f"http/request url is invalid: unsupported URL `{url}`"


def already_streaming(request_id: str) -> str:
    return f"http/request requestId `{request_id}` is already streaming"


def http_failed(why: str | None) -> str:
    return f"http/request failed: {why}"


# -- helpers ------------------------------------------------------------------------------------


def error(reply: dict[str, Any] | None) -> tuple[int, str]:
    assert reply is not None and "result" not in reply, reply
    return reply["error"]["code"], reply["error"]["message"]


def only(actions: list[Any], kind: type) -> Any:
    assert len(actions) == 1 and isinstance(actions[0], kind), actions
    return actions[0]


def fs(h: Harness, method: str, params: Any, conn: int = 1) -> tuple[int, RunFs]:
    """A valid fs call: it yields exactly one RunFs and no answer yet."""
    msg_id = h.request(conn, method, params)
    run = only(h.actions[-1:], RunFs)
    assert h.response(conn, msg_id) is None
    return msg_id, run


def refused(h: Harness, method: str, params: Any, conn: int = 1) -> tuple[int, str]:
    """A call answered at once with an error and nothing else."""
    before = len(h.actions)
    msg_id = h.request(conn, method, params)
    assert len(h.actions) == before + 1 and isinstance(h.actions[-1], Send)
    return error(h.response(conn, msg_id))


def open_handle(h: Harness, handle_id: str, conn: int = 1) -> RunFs:
    msg_id, run = fs(h, "fs/open", {"handleId": handle_id, "path": "file:///tmp/f"}, conn)
    h.feed(FsCompleted(op=run.op, result={}))
    assert h.response(conn, msg_id)["result"] == {}
    return run


HTTP = {"method": "GET", "url": "https://example.com/x", "requestId": "r1"}


def http(h: Harness, conn: int = 1, **params: Any) -> tuple[int, RunHttp]:
    msg_id = h.request(conn, "http/request", {**HTTP, **params})
    run = only(h.actions[-1:], RunHttp)
    return msg_id, run


def deltas(h: Harness, conn: int = 1) -> list[dict[str, Any]]:
    return [n["params"] for n in h.notifications(conn, "http/request/bodyDelta")]


# -- environment/info ---------------------------------------------------------------------------


def test_environment_info_answers_the_host_environment_info() -> None:
    info = {"shell": {"name": "zsh", "path": "/bin/zsh"}, "cwd": "file:///home/me", "extra": [1]}
    h = Harness(host=Host(environment_info=info, env={"SECRET": "x"}))
    h.connect(1)
    h.handshake(1)
    assert h.call(1, "environment/info")["result"] == info
    assert h.call(1, "environment/info", {})["result"] == info
    # The reference's params are serde's unit: a map with keys in it is refused.
    assert h.call(1, "environment/info", {"x": True})["error"] == {
        "code": -32602, "message": "invalid type: map, expected unit"}


def test_environment_info_of_a_default_host_is_empty(h: Harness) -> None:
    assert h.call(1, "environment/info")["result"] == {}


# -- fs: params and RunFs -----------------------------------------------------------------------

FS_CASES = [
    ("fs/readFile", {"path": "file:///tmp/a%20b"}, {"path": "/tmp/a b"}),
    (
        "fs/writeFile",
        {"path": "file:///tmp/out", "dataBase64": b64(b"\x00data\xff")},
        {"path": "/tmp/out", "data": b"\x00data\xff"},
    ),
    ("fs/writeFile", {"path": "file:///tmp/e", "dataBase64": ""}, {"path": "/tmp/e", "data": b""}),
    ("fs/createDirectory", {"path": "file:///tmp/d"}, {"path": "/tmp/d", "recursive": True}),
    (
        "fs/createDirectory",
        {"path": "file:///tmp/d", "recursive": None},
        {"path": "/tmp/d", "recursive": True},
    ),
    (
        "fs/createDirectory",
        {"path": "file:///tmp/d", "recursive": False},
        {"path": "/tmp/d", "recursive": False},
    ),
    ("fs/getMetadata", {"path": "file://localhost/etc/passwd"}, {"path": "/etc/passwd"}),
    ("fs/getMetadata", {"path": "file:etc"}, {"path": "/etc"}),
    ("fs/canonicalize", {"path": "file:///tmp/../tmp/./x"}, {"path": "/tmp/../tmp/./x"}),
    ("fs/readDirectory", {"path": "file:///"}, {"path": "/"}),
    ("fs/readDirectory", {"path": "file:///%E2%9C%93/%FF"}, {"path": "/✓/\udcff"}),
    (
        "fs/remove",
        {"path": "file:///tmp/r"},
        {"path": "/tmp/r", "recursive": True, "force": True},
    ),
    (
        "fs/remove",
        {"path": "file:///tmp/r", "recursive": False, "force": False},
        {"path": "/tmp/r", "recursive": False, "force": False},
    ),
    (
        "fs/copy",
        {"sourcePath": "file:///tmp/s", "destinationPath": "file:///tmp/d%23", "recursive": False},
        {"source": "/tmp/s", "destination": "/tmp/d#", "recursive": False},
    ),
    (
        "fs/copy",
        {"sourcePath": "file:///tmp/s", "destinationPath": "file:///tmp/d", "recursive": True},
        {"source": "/tmp/s", "destination": "/tmp/d", "recursive": True},
    ),
]


# The request each fs method becomes, by its method's name.
REQUEST_OF: dict[str, type[FsRequest]] = {
    cls.method: cls for cls in vars(fs_requests).values()
    if isinstance(cls, type) and issubclass(cls, FsRequest) and cls is not FsRequest
}


@pytest.mark.parametrize("method, params, expected", FS_CASES)
def test_fs_methods_become_run_fs_with_native_paths(
    h: Harness, method: str, params: dict[str, Any], expected: dict[str, Any]
) -> None:
    _, run = fs(h, method, params)
    assert run == RunFs(op=run.op, conn=1, request=REQUEST_OF[method](**expected))


def test_fs_open_read_block_and_close_become_run_fs(h: Harness) -> None:
    open_run = open_handle(h, "h1")
    assert open_run.request == Open(handle_id="h1", path="/tmp/f", mode="read")
    _, run = fs(h, "fs/readBlock", {"handleId": "h1", "offset": 4096, "len": MAX_BLOCK})
    assert run.request == ReadBlock(handle_id="h1", offset=4096, length=MAX_BLOCK)
    _, run = fs(h, "fs/readBlock", {"handleId": "h1", "offset": 0, "len": 1})
    assert run.request == ReadBlock(handle_id="h1", offset=0, length=1)
    _, run = fs(h, "fs/close", {"handleId": "h1"})
    assert run.request == Close(handle_id="h1")


def test_fs_ops_get_distinct_increasing_handles_and_name_their_connection(h: Harness) -> None:
    h.connect(2)
    h.handshake(2)
    _, a = fs(h, "fs/readFile", {"path": "file:///a"})
    _, b = fs(h, "fs/readFile", {"path": "file:///b"}, conn=2)
    _, c = fs(h, "fs/readFile", {"path": "file:///c"})
    assert a.op < b.op < c.op
    assert (a.conn, b.conn, c.conn) == (1, 2, 1)


COPY = {"sourcePath": "file:///tmp/s", "destinationPath": "file:///tmp/d", "recursive": False}
FS_INVALID = [
    # A native path, another scheme: the params are malformed (-32602).
    ("fs/readFile", {"path": "/tmp/x"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/readFile", {"path": "tmp/x"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/readFile", {"path": ""}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/readFile", {"path": "https://h/x"}, INVALID_PARAMS, unsupported_scheme("https")),
    # A well-formed URI naming something that is not a path here: -32600.
    ("fs/readFile", {"path": "file://host/tmp/x"}, INVALID_REQUEST,
     foreign_path("file://host/tmp/x")),
    ("fs/readFile", {"path": "file:///C:/x"}, INVALID_REQUEST, foreign_path("file:///C:/x")),
    ("fs/readFile", {"path": "file:///a%00b"}, INVALID_REQUEST, foreign_path("file:///a%00b")),
    ("fs/readFile", {}, INVALID_PARAMS, missing("path")),
    # The reference names each method's own params struct (see `STRUCTS`).
    ("fs/readFile", None, INVALID_PARAMS, wrong("null", "struct WireFsReadFileParams")),
    ("fs/readFile", ["file:///x"], INVALID_PARAMS,
     wrong("sequence", "struct WireFsReadFileParams")),
    ("fs/close", 5, INVALID_PARAMS, wrong("number", "struct FsCloseParams")),
    ("fs/readFile", {"path": 1}, INVALID_PARAMS, wrong("number", "a string")),
    ("fs/readFile", {"path": None}, INVALID_PARAMS, wrong("null", "a string")),
    ("fs/writeFile", {"path": "/tmp/x", "dataBase64": ""}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/writeFile", {"path": "file:///tmp/x"}, INVALID_PARAMS, missing("dataBase64")),
    ("fs/writeFile", {"path": "file:///tmp/x", "dataBase64": "***"}, INVALID_REQUEST,
     bad_write_data(bad_symbol(42, 0))),
    ("fs/writeFile", {"path": "file:///tmp/x", "dataBase64": "QQ"}, INVALID_REQUEST,
     bad_write_data("Invalid padding")),
    ("fs/writeFile", {"path": "file:///tmp/x", "dataBase64": 5}, INVALID_PARAMS,
     wrong("number", "a string")),
    ("fs/createDirectory", {"path": "/tmp/x"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/createDirectory", {"path": "file:///tmp/x", "recursive": "yes"}, INVALID_PARAMS,
     wrong('string "yes"', "a boolean")),
    ("fs/getMetadata", {"path": "/tmp/x"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/canonicalize", {"path": "/tmp/x"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/readDirectory", {"path": "/tmp/x"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/remove", {"path": "/tmp/x"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/remove", {"path": "file:///tmp/x", "force": 1}, INVALID_PARAMS,
     wrong("number", "a boolean")),
    ("fs/copy", {**COPY, "sourcePath": "/tmp/s"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/copy", {**COPY, "destinationPath": "/tmp/d"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/copy", {**COPY, "destinationPath": "file://h/d"}, INVALID_REQUEST,
     foreign_path("file://h/d")),
    ("fs/copy", {k: v for k, v in COPY.items() if k != "destinationPath"}, INVALID_PARAMS,
     missing("destinationPath")),
    ("fs/copy", {k: v for k, v in COPY.items() if k != "recursive"}, INVALID_PARAMS,
     missing("recursive")),
    ("fs/copy", {**COPY, "recursive": "no"}, INVALID_PARAMS, wrong('string "no"', "a boolean")),
    ("fs/open", {"handleId": "h2", "path": "/tmp/x"}, INVALID_PARAMS, RELATIVE_URI),
    ("fs/open", {"path": "file:///tmp/x"}, INVALID_PARAMS, missing("handleId")),
    ("fs/open", {"handleId": 3, "path": "file:///tmp/x"}, INVALID_PARAMS,
     wrong("number", "a string")),
    ("fs/open", {"handleId": "h2"}, INVALID_PARAMS, missing("path")),
    ("fs/readBlock", {"handleId": "h", "offset": 0, "len": 0}, INVALID_REQUEST, BAD_LEN),
    ("fs/readBlock", {"handleId": "h", "offset": 0, "len": MAX_BLOCK + 1}, INVALID_REQUEST,
     BAD_LEN),
    ("fs/readBlock", {"handleId": "h", "offset": 0}, INVALID_PARAMS, missing("len")),
    ("fs/readBlock", {"handleId": "h", "offset": 0, "len": -1}, INVALID_PARAMS, INVALID_NUMBER),
    ("fs/readBlock", {"handleId": "h", "offset": 0, "len": "1"}, INVALID_PARAMS,
     wrong('string "1"', "u64")),
    ("fs/readBlock", {"handleId": "h", "len": 1}, INVALID_PARAMS, missing("offset")),
    ("fs/readBlock", {"handleId": "h", "offset": -1, "len": 1}, INVALID_PARAMS, INVALID_NUMBER),
    ("fs/readBlock", {"handleId": "h", "offset": 0.5, "len": 1}, INVALID_PARAMS, INVALID_NUMBER),
    ("fs/readBlock", {"offset": 0, "len": 1}, INVALID_PARAMS, missing("handleId")),
    ("fs/close", {}, INVALID_PARAMS, missing("handleId")),
    ("fs/close", {"handleId": None}, INVALID_PARAMS, wrong("null", "a string")),
    ("fs/close", {"handleId": 1}, INVALID_PARAMS, wrong("number", "a string")),
]


@pytest.mark.parametrize("method, params, code, expected", FS_INVALID)
def test_fs_params_are_validated(
    h: Harness, method: str, params: Any, code: int, expected: str
) -> None:
    open_handle(h, "h")  # so only the params can be at fault
    assert refused(h, method, params) == (code, expected)


def test_fs_params_are_checked_before_the_handshake() -> None:
    h = Harness()
    h.connect(1)
    assert refused(h, "fs/readFile", {"path": "/x"}) == (INVALID_PARAMS, RELATIVE_URI)
    assert refused(h, "fs/readFile", {"path": "file://h/x"}) == (INVALID_REQUEST,
                                                                foreign_path("file://h/x"))


# -- fs: completions ----------------------------------------------------------------------------


def test_fs_completed_result_becomes_the_response(h: Harness) -> None:
    msg_id, run = fs(h, "fs/getMetadata", {"path": "file:///tmp"})
    result = {"isDirectory": True, "isFile": False, "isSymlink": False, "size": 4096,
              "createdAtMs": 1, "modifiedAtMs": 2}
    actions = h.feed(FsCompleted(op=run.op, result=result))
    assert len(actions) == 1 and actions[0].conn == 1
    assert json.loads(actions[0].data) == {"jsonrpc": "2.0", "id": msg_id, "result": result}


def test_fs_completed_without_result_answers_an_empty_object(h: Harness) -> None:
    msg_id, run = fs(h, "fs/remove", {"path": "file:///tmp/x"})
    h.feed(FsCompleted(op=run.op))
    assert h.response(1, msg_id)["result"] == {}


def test_fs_completed_error_becomes_an_error_response(h: Harness) -> None:
    msg_id, run = fs(h, "fs/readFile", {"path": "file:///nope"})
    h.feed(FsCompleted(op=run.op, error=RpcError(NOT_FOUND, "No such file: /nope", {"errno": 2})))
    assert h.response(1, msg_id)["error"] == {
        "code": NOT_FOUND,
        "message": "No such file: /nope",
        "data": {"errno": 2},
    }
    msg_id, run = fs(h, "fs/readFile", {"path": "file:///fifo"})
    h.feed(FsCompleted(op=run.op, error=RpcError(INVALID_PARAMS, "is a FIFO")))
    assert h.response(1, msg_id)["error"] == {"code": INVALID_PARAMS, "message": "is a FIFO"}


def test_fs_completions_may_arrive_out_of_order(h: Harness) -> None:
    first, a = fs(h, "fs/readFile", {"path": "file:///a"})
    second, b = fs(h, "fs/readFile", {"path": "file:///b"})
    h.feed(FsCompleted(op=b.op, result={"dataBase64": b64(b"B")}))
    h.feed(FsCompleted(op=a.op, result={"dataBase64": b64(b"A")}))
    assert unb64(h.response(1, first)["result"]["dataBase64"]) == b"A"
    assert unb64(h.response(1, second)["result"]["dataBase64"]) == b"B"


def test_a_completion_after_the_connection_closed_is_dropped(h: Harness) -> None:
    _, run = fs(h, "fs/readFile", {"path": "file:///a"})
    _, failing = fs(h, "fs/open", {"handleId": "h", "path": "file:///a"})
    assert h.disconnect(1) == []  # fs work is not cancelled, only forgotten
    assert h.feed(FsCompleted(op=run.op, result={"dataBase64": ""})) == []
    assert h.feed(FsCompleted(op=failing.op, error=RpcError(NOT_FOUND, "gone"))) == []


def test_a_second_completion_of_one_op_is_dropped(h: Harness) -> None:
    _, run = fs(h, "fs/readFile", {"path": "file:///a"})
    h.feed(FsCompleted(op=run.op, result={}))
    assert h.feed(FsCompleted(op=run.op, result={})) == []


@pytest.mark.parametrize("op", [0, -1, 2, 999])
def test_a_completion_for_an_op_never_issued_raises(h: Harness, op: int) -> None:
    fs(h, "fs/readFile", {"path": "file:///a"})  # op 1 exists
    with pytest.raises(LocalProtocolError, match="never issued"):
        h.feed(FsCompleted(op=op, result={}))


def test_an_fs_completion_for_an_http_op_raises(h: Harness) -> None:
    _, run = http(h)
    with pytest.raises(LocalProtocolError):
        h.feed(FsCompleted(op=run.op, result={}))


# -- fs/open handle rules -----------------------------------------------------------------------


@pytest.mark.parametrize("handle_id", ["x" * 32, "é" * 16, "✓" * 10 + "xx", "a", ""])
def test_handle_ids_up_to_32_bytes_are_accepted(h: Harness, handle_id: str) -> None:
    open_handle(h, handle_id)


@pytest.mark.parametrize("handle_id", ["x" * 33, "é" * 17, "✓" * 11, "\U0001f600" * 9])
def test_handle_ids_over_32_bytes_are_refused(h: Harness, handle_id: str) -> None:
    params = {"handleId": handle_id, "path": "file:///tmp/f"}
    assert refused(h, "fs/open", params) == (INVALID_REQUEST, HANDLE_ID_TOO_LONG)


def test_duplicate_open_is_refused_while_pending_and_once_open(h: Harness) -> None:
    _, run = fs(h, "fs/open", {"handleId": "h", "path": "file:///tmp/f"})
    params = {"handleId": "h", "path": "file:///tmp/g"}
    assert refused(h, "fs/open", params) == (INVALID_REQUEST, handle_exists("h"))
    h.feed(FsCompleted(op=run.op, result={}))
    assert refused(h, "fs/open", params) == (INVALID_REQUEST, handle_exists("h"))


def test_at_most_128_handles_may_be_open_and_a_failed_open_frees_its_slot(h: Harness) -> None:
    runs = {}
    for i in range(128):
        _, runs[i] = fs(h, "fs/open", {"handleId": f"h{i}", "path": "file:///tmp/f"})
    # Opens still in flight count towards the limit.
    params = {"handleId": "extra", "path": "file:///tmp/f"}
    assert refused(h, "fs/open", params) == (INVALID_REQUEST, TOO_MANY_HANDLES)
    for i in range(1, 128):
        h.feed(FsCompleted(op=runs[i].op, result={}))
    assert refused(h, "fs/open", params) == (INVALID_REQUEST, TOO_MANY_HANDLES)
    # A failed open frees both its slot and its id.
    h.feed(FsCompleted(op=runs[0].op, error=RpcError(NOT_FOUND, "no such file")))
    _, run = fs(h, "fs/open", params)
    h.feed(FsCompleted(op=run.op, result={}))
    assert refused(h, "fs/open", {"handleId": "h0", "path": "file:///x"}) == (
        INVALID_REQUEST,
        TOO_MANY_HANDLES,
    )
    # A duplicate is named as such even when the table is full.
    assert refused(h, "fs/open", {"handleId": "h1", "path": "file:///x"}) == (
        INVALID_REQUEST,
        handle_exists("h1"),
    )
    # Closing frees a slot too.
    fs(h, "fs/close", {"handleId": "h5"})
    fs(h, "fs/open", {"handleId": "h0", "path": "file:///x"})


def test_the_handle_limit_follows_the_config() -> None:
    h = Harness(Config(max_fs_handles=2))
    h.connect(1)
    h.handshake(1)
    open_handle(h, "a")
    open_handle(h, "b")
    params = {"handleId": "c", "path": "file:///x"}
    code, message = refused(h, "fs/open", params)
    assert code == INVALID_REQUEST and message.endswith("at most 2")


def test_handle_limit_and_ids_are_per_connection(h: Harness) -> None:
    for i in range(128):
        fs(h, "fs/open", {"handleId": f"h{i}", "path": "file:///tmp/f"})
    h.connect(2)
    h.handshake(2)
    run = open_handle(h, "h0", conn=2)
    assert run.conn == 2
    # A handle of one connection is unknown on another.
    assert refused(h, "fs/readBlock", {"handleId": "h1", "offset": 0, "len": 1}, conn=2) == (
        NOT_FOUND,
        unknown_handle("h1"),
    )


def test_handles_of_a_closed_connection_are_forgotten(h: Harness) -> None:
    open_handle(h, "h")
    h.disconnect(1)
    h.connect(2)
    h.handshake(2, resume="session-1")  # even in the same session
    block = {"handleId": "h", "offset": 0, "len": 1}
    assert refused(h, "fs/readBlock", block, conn=2) == (NOT_FOUND, unknown_handle("h"))
    open_handle(h, "h", conn=2)


def test_read_block_on_an_unknown_handle(h: Harness) -> None:
    block = {"handleId": "nope", "offset": 0, "len": 10}
    assert refused(h, "fs/readBlock", block) == (NOT_FOUND, unknown_handle("nope"))


def test_close_of_an_unknown_handle_succeeds_without_work(h: Harness) -> None:
    before = len(h.actions)
    reply = h.call(1, "fs/close", {"handleId": "nope"})
    assert reply["result"] == {}
    assert h.of_type(RunFs) == [] and len(h.actions) == before + 1


def test_a_closed_handle_is_unknown_at_once(h: Harness) -> None:
    open_handle(h, "h")
    _, run = fs(h, "fs/close", {"handleId": "h"})
    block = {"handleId": "h", "offset": 0, "len": 10}
    assert refused(h, "fs/readBlock", block) == (NOT_FOUND, unknown_handle("h"))
    assert h.call(1, "fs/close", {"handleId": "h"})["result"] == {}  # closing twice is harmless
    h.feed(FsCompleted(op=run.op, result={}))
    open_handle(h, "h")  # the id is free again


def test_read_block_validates_len_before_looking_up_the_handle(h: Harness) -> None:
    params = {"handleId": "nope", "offset": 0, "len": 0}
    assert refused(h, "fs/readBlock", params) == (INVALID_REQUEST, BAD_LEN)


def test_read_block_result_is_passed_through(h: Harness) -> None:
    open_handle(h, "h")
    msg_id, run = fs(h, "fs/readBlock", {"handleId": "h", "offset": 0, "len": 4})
    h.feed(FsCompleted(op=run.op, result={"chunk": b64(b"abcd"), "eof": False}))
    assert h.response(1, msg_id)["result"] == {"chunk": b64(b"abcd"), "eof": False}


# -- http/request: validation -------------------------------------------------------------------

HTTP_INVALID = [
    ({**HTTP, "url": "ftp://example.com/x"}, unsupported_url("ftp://example.com/x")),
    ({**HTTP, "url": "file:///etc/passwd"}, unsupported_url("file:///etc/passwd")),
    ({**HTTP, "url": "http://"}, unsupported_url("http://")),
    ({**HTTP, "url": "http:///path"}, unsupported_url("http:///path")),
    ({**HTTP, "url": "example.com"}, RELATIVE_HTTP_URL),
    ({**HTTP, "url": "/path"}, RELATIVE_HTTP_URL),
    ({**HTTP, "url": ""}, RELATIVE_HTTP_URL),
    ({**HTTP, "url": 5}, wrong("number", "a string")),
    ({k: v for k, v in HTTP.items() if k != "url"}, missing("url")),
    ({k: v for k, v in HTTP.items() if k != "method"}, missing("method")),
    ({**HTTP, "method": 1}, wrong("number", "a string")),
    ({**HTTP, "method": ""}, BAD_HTTP_METHOD),
    ({**HTTP, "method": "GET /"}, BAD_HTTP_METHOD),
    ({**HTTP, "method": "G\u00c9T"}, BAD_HTTP_METHOD),
    ({k: v for k, v in HTTP.items() if k != "requestId"}, missing("requestId")),
    ({**HTTP, "requestId": 7}, wrong("number", "a string")),
    ({**HTTP, "headers": {"a": "b"}}, wrong("map", "a sequence")),
    ({**HTTP, "headers": "a: b"}, wrong('string "a: b"', "a sequence")),
    ({**HTTP, "headers": [["a", "b"]]}, wrong("sequence", "struct HttpHeader")),
    ({**HTTP, "headers": [{"name": "a"}]}, missing("value")),
    ({**HTTP, "headers": [{"value": "b"}]}, missing("name")),
    ({**HTTP, "headers": [{"name": "a", "value": 1}]}, wrong("number", "a string")),
    ({**HTTP, "headers": [{"name": None, "value": "b"}]}, wrong("null", "a string")),
    ({**HTTP, "headers": [{"name": "a", "value": "b"}, 3]}, wrong("number", "struct HttpHeader")),
    ({**HTTP, "redirectPolicy": "sometimes"}, unknown_variant("sometimes", REDIRECT_VARIANTS)),
    ({**HTTP, "redirectPolicy": "Follow"}, unknown_variant("Follow", REDIRECT_VARIANTS)),
    ({**HTTP, "redirectPolicy": {"never": None}}, unknown_variant("never", REDIRECT_VARIANTS)),
    ({**HTTP, "redirectPolicy": 1}, wrong("number", "string or map")),
    ({**HTTP, "redirectPolicy": {}}, wrong("map", "string or map")),
    ({**HTTP, "bodyBase64": "%%%%"}, bad_symbol(37, 0)),
    ({**HTTP, "bodyBase64": "QUJDRA"}, "Invalid padding"),
    ({**HTTP, "timeoutMs": -1}, INVALID_NUMBER),
    ({**HTTP, "timeoutMs": 1.5}, INVALID_NUMBER),
    ({**HTTP, "timeoutMs": "1"}, wrong('string "1"', "u64")),
    ({**HTTP, "streamResponse": "yes"}, wrong('string "yes"', "a boolean")),
    (["GET"], wrong("sequence", "struct HttpRequestParams")),
    (None, wrong("null", "struct HttpRequestParams")),
]


@pytest.mark.parametrize("params, expected", HTTP_INVALID)
def test_http_request_params_are_validated(h: Harness, params: Any, expected: str) -> None:
    assert refused(h, "http/request", params) == (INVALID_PARAMS, expected)


@pytest.mark.parametrize(
    "body, what",
    [(1, "number"), (True, "boolean `true`"), ([], "sequence"), ({}, "map")],
)
def test_a_non_string_body_is_invalid_params(h: Harness, body: Any, what: str) -> None:
    assert refused(h, "http/request", {**HTTP, "bodyBase64": body}) == (
        INVALID_PARAMS, wrong(what, "a string")
    )


def test_a_method_with_a_trailing_newline_is_refused(h: Harness) -> None:
    assert refused(h, "http/request", {**HTTP, "method": "GET\n"}) == (
        INVALID_PARAMS, BAD_HTTP_METHOD
    )


@pytest.mark.parametrize(
    "method, params",
    [
        ("fs/readFile", {"path": "file://[/x"}),
        ("fs/copy", {**COPY, "destinationPath": "file://[::1/x"}),
        ("http/request", {**HTTP, "url": "http://[/"}),
        ("http/request", {**HTTP, "url": "https://[::1/path"}),
    ],
    ids=["fs-path", "fs-copy", "http-url", "http-url-v6"],
)
def test_a_malformed_ipv6_host_is_an_error_answer(h: Harness, method: str, params: Any) -> None:
    code, _ = refused(h, method, params)
    assert code == INVALID_PARAMS


def test_http_request_becomes_run_http_with_its_fields(h: Harness) -> None:
    headers = [
        {"name": "X-Repeat", "value": "1"},
        {"name": "accept", "value": "*/*"},
        {"name": "X-Repeat", "value": "2"},
    ]
    _, run = http(
        h,
        method="POST",
        url="HTTPS://example.com:8443/p?q=1",
        headers=headers,
        bodyBase64=b64(b"\x00body"),
        timeoutMs=1500,
        redirectPolicy="stop",
    )
    assert run.request == HttpRequest(
        method="POST",
        url="HTTPS://example.com:8443/p?q=1",
        headers=(("X-Repeat", "1"), ("accept", "*/*"), ("X-Repeat", "2")),
        body=b"\x00body",
        timeout_ms=1500,
        stream_response=False,
        follow_redirects=False,
    )


def test_http_method_is_passed_as_given(h: Harness) -> None:
    # HTTP methods are case-sensitive tokens (RFC 9110): "get" is not "GET", and custom ones pass.
    for method in ("get", "PROPFIND", "M-SEARCH", "x!#$%&'*+.^_`|~"):
        _, run = http(h, method=method)
        assert run.request.method == method


def test_http_request_defaults(h: Harness) -> None:
    _, run = http(h, url="http://127.0.0.1/")
    assert run.request == HttpRequest(
        method="GET",
        url="http://127.0.0.1/",
        headers=(),
        body=None,
        timeout_ms=None,
        stream_response=False,
        follow_redirects=True,
    )
    _, run = http(h, redirectPolicy="follow", headers=[], timeoutMs=0, bodyBase64="")
    assert run.request.follow_redirects is True and run.request.headers == ()
    assert run.request.timeout_ms == 0 and run.request.body == b""
    _, run = http(h, redirectPolicy={"stop": None}, headers=None, streamResponse=None)
    assert run.request.follow_redirects is False and run.request.stream_response is False
    _, run = http(h, requestId="")
    assert run.request.url == HTTP["url"]


def test_http_params_are_checked_before_the_handshake() -> None:
    h = Harness()
    h.connect(1)
    assert refused(h, "http/request", {**HTTP, "url": "ftp://x/"}) == (
        INVALID_PARAMS, unsupported_url("ftp://x/")
    )


# -- http/request: answers ----------------------------------------------------------------------


def test_buffered_response_shape(h: Harness) -> None:
    msg_id, run = http(h)
    headers = (("Content-Type", "text/plain"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"))
    actions = h.feed(HttpResponded(op=run.op, status=201, headers=headers, body=b"hello"))
    reply = json.loads(only(actions, Send).data)
    assert reply == {
        "jsonrpc": "2.0",
        "id": msg_id,
        "result": {
            "status": 201,
            "headers": [
                {"name": "Content-Type", "value": "text/plain"},
                {"name": "Set-Cookie", "value": "a=1"},
                {"name": "Set-Cookie", "value": "b=2"},
            ],
            "bodyBase64": b64(b"hello"),
        },
    }
    # The op is done: a finish the adapter still reports is dropped, not answered twice.
    assert h.feed(HttpFinished(op=run.op)) == []
    assert h.feed(HttpBodyReceived(op=run.op, data=b"x")) == []
    assert h.feed(HttpResponded(op=run.op, status=200, headers=())) == []
    assert deltas(h) == []


def test_buffered_response_with_empty_body(h: Harness) -> None:
    msg_id, run = http(h)
    h.feed(HttpResponded(op=run.op, status=204, headers=()))
    assert h.response(1, msg_id)["result"] == {"status": 204, "headers": [], "bodyBase64": ""}


def test_streaming_response_then_body_deltas_then_done(h: Harness) -> None:
    msg_id, run = http(h, streamResponse=True, requestId="s")
    assert run.request.stream_response is True
    first = h.feed(HttpResponded(op=run.op, status=200, headers=(("a", "b"),)))
    assert json.loads(only(first, Send).data)["result"] == {
        "status": 200,
        "headers": [{"name": "a", "value": "b"}],
        "bodyBase64": "",
    }
    h.feed(HttpBodyReceived(op=run.op, data=b"part one"))
    h.feed(HttpBodyReceived(op=run.op, data=b""))
    h.feed(HttpBodyReceived(op=run.op, data=b"\xffpart two"))
    h.feed(HttpFinished(op=run.op))
    assert deltas(h) == [
        {"requestId": "s", "seq": 1, "deltaBase64": b64(b"part one"), "done": False, "error": None},
        {"requestId": "s", "seq": 2, "deltaBase64": "", "done": False, "error": None},
        {"requestId": "s", "seq": 3, "deltaBase64": b64(b"\xffpart two"), "done": False,
         "error": None},
        {"requestId": "s", "seq": 4, "deltaBase64": "", "done": True, "error": None},
    ]
    # The response came first, then the deltas, in the order the messages were sent.
    methods = [m.get("method", "response") for m in h.messages(1)][-5:]
    assert methods == ["response"] + ["http/request/bodyDelta"] * 4
    # Anything after done is dropped.
    assert h.feed(HttpBodyReceived(op=run.op, data=b"late")) == []
    assert h.feed(HttpFinished(op=run.op)) == []


def test_streaming_body_that_fails_midway_ends_with_done_and_the_error(h: Harness) -> None:
    _, run = http(h, streamResponse=True)
    h.feed(HttpResponded(op=run.op, status=200, headers=()))
    h.feed(HttpBodyReceived(op=run.op, data=b"abc"))
    h.feed(HttpFinished(op=run.op, error="connection reset"))
    assert deltas(h)[-1] == {
        "requestId": "r1", "seq": 2, "deltaBase64": "", "done": True, "error": "connection reset"
    }


def test_streaming_with_no_body_still_sends_one_done_delta(h: Harness) -> None:
    _, run = http(h, streamResponse=True)
    h.feed(HttpResponded(op=run.op, status=200, headers=()))
    h.feed(HttpFinished(op=run.op))
    assert deltas(h) == [
        {"requestId": "r1", "seq": 1, "deltaBase64": "", "done": True, "error": None}
    ]


def test_a_streamed_response_reported_twice_is_a_local_protocol_error(h: Harness) -> None:
    _, run = http(h, streamResponse=True)
    h.feed(HttpResponded(op=run.op, status=200, headers=()))
    with pytest.raises(LocalProtocolError, match="twice"):
        h.feed(HttpResponded(op=run.op, status=200, headers=()))


def test_a_request_id_already_streaming_is_refused_until_done(h: Harness) -> None:
    _, run = http(h, streamResponse=True, requestId="dup")
    again = {**HTTP, "requestId": "dup", "streamResponse": True}
    assert refused(h, "http/request", again) == (INVALID_PARAMS, already_streaming("dup"))
    h.feed(HttpResponded(op=run.op, status=200, headers=()))
    assert refused(h, "http/request", again) == (INVALID_PARAMS, already_streaming("dup"))
    # A buffered request with the same id does not stream, so it does not collide.
    http(h, requestId="dup")
    h.feed(HttpFinished(op=run.op))
    _, second = http(h, requestId="dup", streamResponse=True)
    h.feed(HttpResponded(op=second.op, status=200, headers=()))
    h.feed(HttpBodyReceived(op=second.op, data=b"x"))
    # The second stream numbers its deltas afresh.
    assert [d["seq"] for d in deltas(h) if d["requestId"] == "dup"] == [1, 1]


def test_request_ids_stream_independently_per_connection(h: Harness) -> None:
    h.connect(2)
    h.handshake(2)
    _, one = http(h, streamResponse=True, requestId="same")
    _, two = http(h, conn=2, streamResponse=True, requestId="same")
    h.feed(HttpResponded(op=two.op, status=200, headers=()))
    h.feed(HttpBodyReceived(op=two.op, data=b"2"))
    assert deltas(h, 1) == [] and [unb64(d["deltaBase64"]) for d in deltas(h, 2)] == [b"2"]


def test_failure_before_the_response_is_an_internal_error(h: Harness) -> None:
    msg_id, run = http(h)
    h.feed(HttpFinished(op=run.op, error="connection refused"))
    assert error(h.response(1, msg_id)) == (INTERNAL_ERROR, http_failed("connection refused"))
    # A streaming request that fails before its response frees its requestId, sends no delta.
    msg_id, run = http(h, streamResponse=True, requestId="s")
    h.feed(HttpFinished(op=run.op, error="timed out"))
    assert error(h.response(1, msg_id)) == (INTERNAL_ERROR, http_failed("timed out"))
    assert deltas(h) == []
    http(h, streamResponse=True, requestId="s")


def test_connection_close_cancels_in_flight_http_requests(h: Harness) -> None:
    _, buffered = http(h, requestId="a")
    _, streaming = http(h, requestId="b", streamResponse=True)
    _, waiting = http(h, requestId="c", streamResponse=True)
    _, done = http(h, requestId="d")
    _, fs_run = fs(h, "fs/readFile", {"path": "file:///x"})
    h.feed(HttpResponded(op=streaming.op, status=200, headers=()))
    h.feed(HttpBodyReceived(op=streaming.op, data=b"x"))
    h.feed(HttpResponded(op=done.op, status=200, headers=()))

    assert h.disconnect(1) == [
        CancelHttp(op=buffered.op),
        CancelHttp(op=streaming.op),
        CancelHttp(op=waiting.op),
    ]
    # What the adapter reports afterwards for them is dropped.
    assert h.feed(HttpResponded(op=buffered.op, status=200, headers=())) == []
    assert h.feed(HttpBodyReceived(op=streaming.op, data=b"y")) == []
    assert h.feed(HttpFinished(op=streaming.op, error="cancelled")) == []
    assert h.feed(HttpFinished(op=waiting.op)) == []
    assert h.feed(FsCompleted(op=fs_run.op, result={})) == []


def test_other_connections_http_is_not_cancelled(h: Harness) -> None:
    h.connect(2)
    h.handshake(2)
    _, mine = http(h)
    their_id, theirs = http(h, conn=2)
    assert h.disconnect(1) == [CancelHttp(op=mine.op)]
    h.feed(HttpResponded(op=theirs.op, status=200, headers=()))
    assert h.response(2, their_id)["result"]["status"] == 200


@pytest.mark.parametrize("streaming", [False, True])
def test_body_before_a_streamed_response_is_a_local_protocol_error(
    h: Harness, streaming: bool
) -> None:
    _, run = http(h, streamResponse=streaming)
    with pytest.raises(LocalProtocolError, match="body without a streamed response"):
        h.feed(HttpBodyReceived(op=run.op, data=b"x"))


@pytest.mark.parametrize(
    "event",
    [
        lambda op: HttpBodyReceived(op=op, data=b"x"),
        lambda op: HttpResponded(op=op, status=200, headers=()),
        lambda op: HttpFinished(op=op),
    ],
    ids=["body", "responded", "finished"],
)
def test_http_events_for_fs_ops_raise(h: Harness, event: Any) -> None:
    _, run = fs(h, "fs/readFile", {"path": "file:///x"})
    with pytest.raises(LocalProtocolError, match="not an http request"):
        h.feed(event(run.op))


def test_services_trace_replays(h: Harness) -> None:
    open_handle(h, "h")
    _, run = fs(h, "fs/readBlock", {"handleId": "h", "offset": 0, "len": 3})
    h.feed(FsCompleted(op=run.op, result={"chunk": b64(b"abc"), "eof": True}))
    _, run = fs(h, "fs/writeFile", {"path": "file:///tmp/w", "dataBase64": b64(b"\x00\x01")})
    h.feed(FsCompleted(op=run.op, error=RpcError(NOT_FOUND, "nope", {"kind": "x"})))
    _, run = fs(h, "fs/readDirectory", {"path": "file:///tmp"})
    h.feed(FsCompleted(op=run.op, result={"entries": [{"fileName": "a", "isDirectory": False,
                                                       "isFile": True}]}))
    _, run = http(h, streamResponse=True)
    h.feed(HttpResponded(op=run.op, status=200, headers=(("k", "v"),), body=b""))
    h.feed(HttpBodyReceived(op=run.op, data=b"\xff"))
    h.feed(HttpFinished(op=run.op))
    _, run = http(h, requestId="b")
    h.disconnect(1)
    h.assert_replays()


def test_http_is_refused_when_the_operators_floor_has_no_network() -> None:
    closed = Policy.of([PathRule(path="/", access="read")], network=False)
    h = Harness(config=Config(floor=closed))
    h.connect(1)
    h.handshake()
    assert h.call(1, "http/request", HTTP)["error"] == {
        "code": -32600,
        "message": "http/request is refused: the operator's sandbox allows no network "
                   "(the server runs with --sandbox and without --allow-network)"}
    assert not h.of_type(RunHttp)
    opened = Harness(config=Config(floor=Policy.of([PathRule(path="/", access="read")], True)))
    opened.connect(1)
    opened.handshake()
    http(opened)  # the operator allowed the network: the call runs
