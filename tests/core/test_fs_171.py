"""The fs calls added in 0.171 (fs/walk, fs/open's mode, fs/writeBlock): every params error, as
measured against the reference, and the requests that reach the adapter."""

from __future__ import annotations

from typing import Any

import pytest

from execproto import FsCompleted, RpcError, RunFs
from execproto.fs import Open, Walk, WriteBlock

from .harness import Harness, b64
from .messages import missing, wrong

T = "file:///tmp/t"
OPTIONS = {"maxDepth": 1, "maxDirectories": 2, "maxEntries": 3, "followDirectorySymlinks": True}
LIMITS = "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"
ZERO = "filesystem walk limits must be greater than zero"
BAD_WRITE_LEN = "file write block length must be between 1 and 1048576"
RANGE = "file write range exceeds the signed 64-bit file offset limit"


def error(h: Harness, method: str, params: Any) -> dict[str, Any]:
    reply = h.call(1, method, params)
    assert "error" in reply, reply
    return reply["error"]  # type: ignore[no-any-return]


def params_error(message: str) -> dict[str, Any]:
    return {"code": -32602, "message": message}


def request_error(message: str) -> dict[str, Any]:
    return {"code": -32600, "message": message}


WALK_PARAMS_ERRORS = [
    ({}, missing("path")),
    ({"path": T}, missing("options")),
    ({"path": T, "options": None}, wrong("null", "struct WalkOptions")),
    ({"path": T, "options": 1}, wrong("number", "struct WalkOptions")),
    ({"path": T, "options": {}}, missing("maxDepth")),
    ({"path": T, "options": {"maxDepth": 1}}, missing("maxDirectories")),
    ({"path": T, "options": {"maxDepth": 1, "maxDirectories": 1}}, missing("maxEntries")),
    ({"path": T, "options": {"maxDepth": 1, "maxDirectories": 1, "maxEntries": 1}},
     missing("followDirectorySymlinks")),
    ({"path": T, "options": {**OPTIONS, "maxDepth": None}}, wrong("null", "usize")),
    ({"path": T, "options": {**OPTIONS, "maxDepth": "x"}}, wrong('string "x"', "usize")),
    ({"path": T, "options": {**OPTIONS, "maxDepth": -1}}, "invalid number"),
    ({"path": T, "options": {**OPTIONS, "maxEntries": 1.5}}, "invalid number"),
    ({"path": T, "options": {**OPTIONS, "maxDirectories": 2**64}}, "invalid number"),
    ({"path": T, "options": {**OPTIONS, "followDirectorySymlinks": None}},
     wrong("null", "a boolean")),
    ({"path": T, "options": {**OPTIONS, "pruneHiddenDirectories": 1}},
     wrong("number", "a boolean")),
    ({"path": T, "options": [1, 2, 3]},
     "invalid length 3, expected struct WalkOptions with 5 elements"),
    ({"path": T, "options": [1, 2, 3, True, True, 9]},
     "invalid length 6, expected fewer elements in array"),
    ({"path": T, "options": [1, "x", 3]}, wrong('string "x"', "usize")),
    ({"path": "/tmp", "options": OPTIONS}, "invalid URI: relative URL without a base"),
    ({"path": "http://x/tmp", "options": OPTIONS}, "unsupported path URI scheme `http`"),
]


@pytest.mark.parametrize("params, message", WALK_PARAMS_ERRORS)
def test_walk_params_errors(h: Harness, params: Any, message: str) -> None:
    assert error(h, "fs/walk", params) == params_error(message)


@pytest.mark.parametrize("options, message", [
    ({"maxDepth": 65}, LIMITS), ({"maxDirectories": 10_001}, LIMITS),
    ({"maxEntries": 50_001}, LIMITS), ({"maxDirectories": 0}, ZERO), ({"maxEntries": 0}, ZERO),
])
def test_walk_limits_are_bad_requests(h: Harness, options: Any, message: str) -> None:
    assert error(h, "fs/walk", {"path": T, "options": {**OPTIONS, **options}}) == (
        request_error(message))
    assert not h.of_type(RunFs)


def test_walk_of_another_host_is_a_bad_request(h: Harness) -> None:
    uri = "file://otherhost/tmp"
    assert error(h, "fs/walk", {"path": uri, "options": OPTIONS}) == (
        request_error(f"'{uri}' is invalid on 'linux'"))


@pytest.mark.parametrize("options", [
    {"maxDepth": 0, "maxDirectories": 10_000, "maxEntries": 50_000,
     "followDirectorySymlinks": False},
    [64, 1, 1, True, True],
    [0, 1, 1, False],
])
def test_walk_becomes_run_fs(h: Harness, options: Any) -> None:
    msg_id = h.request(1, "fs/walk", {"path": T + "/./x/..", "options": options, "junk": 1})
    (run,) = h.of_type(RunFs)
    assert run.request.method == "fs/walk"
    p = run.request
    assert isinstance(p, Walk)
    assert p.path == "/tmp/t/./x/.."  # the adapter normalizes it
    assert all(v in (0, 64, True, False) for v in (p.max_depth, p.follow, p.prune_hidden))
    result = {"entries": [], "errors": [], "truncated": False}
    h.feed(FsCompleted(op=run.op, result=result))
    assert h.response(1, msg_id) == {"jsonrpc": "2.0", "id": msg_id, "result": result}


def test_walk_options_defaults(h: Harness) -> None:
    h.request(1, "fs/walk", {"path": T, "options": OPTIONS})
    (run,) = h.of_type(RunFs)
    assert run.request == Walk(path="/tmp/t", max_depth=1, max_directories=2, max_entries=3,
                               follow=True, prune_hidden=False)


# -- fs/open's mode --------------------------------------------------------------------------

OPEN = {"handleId": "h", "path": T}


@pytest.mark.parametrize("mode, message", [
    ("bogus", "unknown variant `bogus`, expected `read` or `replace`"),
    ("Replace", "unknown variant `Replace`, expected `read` or `replace`"),
    (1, wrong("number", "string or map")),
    (None, wrong("null", "string or map")),
    (["read"], wrong("sequence", "string or map")),
    ({}, "invalid value: map, expected map with a single key"),
    ({"read": 1, "replace": 2}, "invalid value: map, expected map with a single key"),
    ({"replace": {}}, wrong("map", "unit")),
    ({"bogus": None}, "unknown variant `bogus`, expected `read` or `replace`"),
])
def test_open_mode_errors(h: Harness, mode: Any, message: str) -> None:
    assert error(h, "fs/open", {**OPEN, "mode": mode}) == params_error(message)


@pytest.mark.parametrize("mode, expected", [
    ("read", "read"), ("replace", "replace"), ({"read": None}, "read"),
    ({"replace": None}, "replace"),
])
def test_open_modes_reach_the_adapter(h: Harness, mode: Any, expected: str) -> None:
    h.request(1, "fs/open", {**OPEN, "mode": mode})
    (run,) = h.of_type(RunFs)
    assert run.request == Open(handle_id="h", path="/tmp/t", mode=expected)


# -- fs/writeBlock ---------------------------------------------------------------------------


def opened(h: Harness, handle: str = "h") -> None:
    msg_id = h.request(1, "fs/open", {"handleId": handle, "path": T, "mode": "replace"})
    run = h.of_type(RunFs)[-1]
    h.feed(FsCompleted(op=run.op, result={"handleId": handle}))
    assert "result" in (h.response(1, msg_id) or {})


@pytest.mark.parametrize("params, message", [
    ({}, missing("handleId")),
    ({"handleId": "h"}, missing("offset")),
    ({"handleId": "h", "offset": 0}, missing("chunk")),
    ({"handleId": "h", "offset": -1, "chunk": "YQ=="}, "invalid number"),
    ({"handleId": "h", "offset": "0", "chunk": "YQ=="}, wrong('string "0"', "u64")),
    ({"handleId": "h", "offset": 0, "chunk": None}, wrong("null", "a string")),
    ({"handleId": "h", "offset": 0, "chunk": "!"}, "Invalid symbol 33, offset 0."),
    ({"handleId": "h", "offset": 0, "chunk": "YQ"}, "Invalid padding"),
    ({"handleId": "h", "offset": 0, "chunk": "YQ="}, "Invalid padding"),
])
def test_write_block_params_errors(h: Harness, params: Any, message: str) -> None:
    assert error(h, "fs/writeBlock", params) == params_error(message)


def test_write_block_checks_length_then_handle_then_range(h: Harness) -> None:
    big = b64(b"x" * ((1 << 20) + 1))
    assert error(h, "fs/writeBlock", {"handleId": "nope", "offset": 0, "chunk": ""}) == (
        request_error(BAD_WRITE_LEN))
    assert error(h, "fs/writeBlock", {"handleId": "nope", "offset": 0, "chunk": big}) == (
        request_error(BAD_WRITE_LEN))
    assert error(h, "fs/writeBlock", {"handleId": "nope", "offset": 2**63, "chunk": "YQ=="}) == {
        "code": -32004, "message": "unknown file handle `nope`"}
    opened(h)
    assert error(h, "fs/writeBlock", {"handleId": "h", "offset": 2**63 - 1, "chunk": "YQ=="}) == (
        request_error(RANGE))
    h.request(1, "fs/writeBlock", {"handleId": "h", "offset": 2**63 - 2, "chunk": "YQ=="})
    run = h.of_type(RunFs)[-1]
    assert run.request == WriteBlock(handle_id="h", offset=2**63 - 2, data=b"a")
    h.feed(FsCompleted(op=run.op, error=RpcError(-32603, "File too large (os error 27)")))
    assert h.messages(1)[-1]["error"] == {"code": -32603, "message": "File too large (os error 27)"}


def test_new_fs_methods_need_the_handshake() -> None:
    h = Harness()
    h.connect(1)
    calls = [("fs/walk", {"path": T, "options": OPTIONS}),
             ("fs/writeBlock", {"handleId": "h", "offset": 0, "chunk": "YQ=="}),
             ("fs/watchMissing", {"watchId": 1, "missing": []})]
    for method, params in calls:
        assert error(h, method, params) == request_error(
            "client must call initialize before using filesystem methods")
    # Params are checked first, in any state.
    assert error(h, "fs/walk", {"path": T}) == params_error(missing("options"))
