"""Bad input, end to end: every malformed frame gets its documented error, and the connection
that sent it keeps working.

One server per adapter serves the whole module; the matrix cases share one initialized
connection, so a case that broke it would also fail every case after it. Cases that close a
connection by design (invalid UTF-8 in a text frame, a response-shaped frame, ...) and cases
about the handshake use connections of their own.

The oversized frame (> 64 MiB, close 1009) is covered by
test_wire.py::test_an_oversized_message_closes_with_1009_and_the_server_keeps_serving.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execproto._methods import METHODS as REGISTRY

from .conftest import ADAPTERS, Server, uri
from .wsclient import Client, Closed

PARSE = -32600  # a frame that is not a message; also the handshake's and some fs checks' code
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
NOT_AN_OBJECT = "expected a JSON-RPC object"
BAD_ID = "data did not match any variant of untagged enum RequestId"

# -- the method/field/kind table (the registry's schemas, refined by the parsers' errors) ---------
# A trailing "?" marks an optional field. "a.b" is field b of the object in field a.
METHODS: dict[str, dict[str, str]] = {
    "initialize": {"clientName": "text", "resumeSessionId": "text?", "outputAcks": "bool?"},
    "process/start": {
        "processId": "text",
        "argv": "argv",
        "cwd": "cwd",
        "env": "map",
        "tty": "bool",
        "pipeStdin": "bool?",
        "arg0": "text?",
        "envPolicy": "policy?",
        "envPolicy.inherit": "inherit",
        "envPolicy.ignoreDefaultExcludes": "bool",
        "envPolicy.exclude": "texts",
        "envPolicy.set": "map",
        "envPolicy.includeOnly": "texts",
        "rows": "dim?",
        "cols": "dim?",
        "enforceManagedNetwork": "bool?",
        "sandbox": "sandbox?",
    },
    "process/read": {
        "processId": "text", "afterSeq": "uint?", "maxBytes": "uint?", "waitMs": "uint?",
    },
    "process/write": {
        "processId": "text", "chunk": "b64", "writeId": "writeid", "closeStdin": "bool?",
    },
    "process/signal": {"processId": "text", "signal": "signal"},
    "process/terminate": {"processId": "text"},
    "process/ack": {"processId": "text", "seq": "uint"},
    "process/resize": {"processId": "text", "rows": "dim", "cols": "dim"},
    "environment/info": {},
    "environment/status": {},
    "session/end": {},
    "fs/readFile": {"path": "uri"},
    "fs/writeFile": {"path": "uri", "dataBase64": "fsb64"},
    "fs/createDirectory": {"path": "uri", "recursive": "bool?"},
    "fs/getMetadata": {"path": "uri"},
    "fs/canonicalize": {"path": "uri"},
    "fs/readDirectory": {"path": "uri"},
    "fs/remove": {"path": "uri", "recursive": "bool?", "force": "bool?"},
    "fs/copy": {"sourcePath": "uri", "destinationPath": "uri", "recursive": "bool"},
    "fs/open": {"handleId": "handle", "path": "uri", "mode": "openmode?"},
    "fs/readBlock": {"handleId": "text", "offset": "uint", "len": "blocklen"},
    "fs/close": {"handleId": "text"},
    "fs/walk": {"path": "uri", "options": "walk", "options.followDirectorySymlinks": "bool"},
    "fs/writeBlock": {"handleId": "text", "offset": "uint", "chunk": "block"},
    "fs/watchMissing": {"watchId": "uint", "missing": "uris", "present": "uri?"},
    "environmentConfig/read": {"cwd": "uri", "configPaths": "keypaths",
                               "requirementsPaths": "keypaths"},
    "capabilities/discoverV2": {"cwd": "uri", "sandbox": "sandbox?"},
    "capabilityRoots/discoverV1": {"roots": "roots"},
    "forward/open": {"port": "port", "host": "host?", "sessionId": "text?"},
    "forward/write": {"streamId": "uint", "dataBase64": "b64?", "eof": "bool?"},
    "forward/ack": {"streamId": "uint", "seq": "uint"},
    "forward/close": {"streamId": "uint"},
    # The registry marks headers required (Codex sends them); parse_http reads it as optional.
    "http/request": {
        "method": "method",
        "url": "url",
        "headers": "headers?",
        "bodyBase64": "b64?",
        "timeoutMs": "uint?",
        "requestId": "text",
        "streamResponse": "bool?",
        "redirectPolicy": "redirect?",
    },
}
# Every fs call but the watch may carry a sandbox.
for _name in METHODS:
    if _name.startswith("fs/") and _name != "fs/watchMissing":
        METHODS[_name]["sandbox"] = "sandbox?"

# What the params object itself is called in "invalid type: ..., expected <struct>".
STRUCTS = {
    "initialize": "struct InitializeParams",
    "process/start": "struct WireExecParams",
    "process/read": "struct ReadParams",
    "process/write": "struct WriteParams",
    "process/signal": "struct SignalParams",
    "process/terminate": "struct TerminateParams",
    "process/ack": "struct AckParams",
    "process/resize": "struct ResizeParams",
    "environment/info": "unit",
    "environment/status": "unit",
    "session/end": "unit",
    "http/request": "struct HttpRequestParams",
    # Each fs method's own struct, as the reference names it (0.171.0, probed).
    "fs/readFile": "struct WireFsReadFileParams",
    "fs/writeFile": "struct WireFsWriteFileParams",
    "fs/createDirectory": "struct WireFsCreateDirectoryParams",
    "fs/getMetadata": "struct WireFsGetMetadataParams",
    "fs/canonicalize": "struct WireFsCanonicalizeParams",
    "fs/readDirectory": "struct WireFsReadDirectoryParams",
    "fs/walk": "struct WireFsWalkParams",
    "fs/remove": "struct WireFsRemoveParams",
    "fs/copy": "struct WireFsCopyParams",
    "fs/open": "struct WireFsOpenParams",
    "fs/readBlock": "struct FsReadBlockParams",
    "fs/writeBlock": "struct FsWriteBlockParams",
    "fs/close": "struct FsCloseParams",
    "fs/watchMissing": "struct FsWatchMissingParams",
    "environmentConfig/read": "struct EnvironmentConfigReadParams",
    "capabilities/discoverV2": "struct DiscoverV2CapabilitiesRequest",
    "capabilityRoots/discoverV1": "struct WireCapabilityRootsDiscoverParams",
    "forward/open": "struct ForwardOpenParams",
    "forward/write": "struct ForwardWriteParams",
    "forward/ack": "struct ForwardAckParams",
    "forward/close": "struct ForwardCloseParams",
}
# Params that take serde's sequence form of their struct: ``[1]`` is their first field.
SEQUENCE = {
    "fs/watchMissing": "invalid length 1, expected struct FsWatchMissingParams with 3 elements",
    "capabilities/discoverV2": "invalid type: number, expected a string",
}

# Valid params for each method (the registry's examples): each case breaks exactly one field of
# these, so the error must name that field. None of the cases gets past validation, so nothing
# is run or written.
_POLICY = {"inherit": "core", "ignoreDefaultExcludes": False, "exclude": [], "set": {},
           "includeOnly": []}
VALID: dict[str, dict[str, Any]] = {
    name: copy.deepcopy(method.example) for name, method in REGISTRY.items()
    if name != "initialized"  # a notification: nothing answers it
}
VALID["initialize"] = {"clientName": "bad-input"}
VALID["process/start"]["envPolicy"] = _POLICY  # so that its fields can be broken too

# How a required field of each kind is named in "invalid type: null, expected <wanted>".
WANTED = {
    "text": "a string", "writeid": "a string", "handle": "a string", "uri": "a string",
    "cwd": "a string", "b64": "a string", "fsb64": "a string", "method": "a string",
    "url": "a string", "inherit": "a string", "bool": "a boolean", "uint": "u64",
    "blocklen": "u64", "argv": "a sequence", "texts": "a sequence", "map": "a map",
    "signal": "string or map", "walk": "struct WalkOptions", "block": "a string",
    "uris": "a sequence", "keypaths": "a sequence", "roots": "a sequence",
}
# Kinds whose null is refused in words of their own ("{field}": the field's name).
NULL = {
    "dim": "{field} must be an integer from 1 to 65535",
    "port": "port must be an integer from 1 to 65535",
}

P, R = INVALID_PARAMS, INVALID_REQUEST
_NUMBER_NOT_STRING = "invalid type: number, expected a string"
_TEXT: list[tuple[Any, int, str]] = [
    (True, P, "invalid type: boolean `true`, expected a string"),
    (7, P, _NUMBER_NOT_STRING),
    ([], P, "invalid type: sequence, expected a string"),
]
_UINT: list[tuple[Any, int, str]] = [
    ("1", P, 'invalid type: string "1", expected u64'),
    (False, P, "invalid type: boolean `false`, expected u64"),
    (-1, P, "invalid number"),
    (1.5, P, "invalid number"),
    (2**64, P, "invalid number"),  # one past u64
]
_FS_B64 = "fs/writeFile requires valid base64 dataBase64: "
_WS_HOST = "'file://elsewhere/tmp' is invalid on 'linux'"
# Each kind's wrong values: (value, code, message). Strings are JSON-escaped on the way, so the
# emoji below reaches the server as a surrogate pair and must come back the same way.
WRONG: dict[str, list[tuple[Any, int, str]]] = {
    "text": _TEXT,
    "writeid": [*_TEXT, ("", P, "writeId must not be empty")],
    "handle": [
        *_TEXT,
        ("h" * 33, R, "file handle ID must not exceed 32 bytes"),
        ("é" * 17, R, "file handle ID must not exceed 32 bytes"),  # 17 chars, 34 UTF-8 bytes
    ],
    "bool": [
        ("x", P, 'invalid type: string "x", expected a boolean'),
        (0, P, "invalid type: number, expected a boolean"),
        ("\U0001f600", P, 'invalid type: string "\U0001f600", expected a boolean'),
        ({}, P, "invalid type: map, expected a boolean"),
    ],
    "uint": _UINT,
    "blocklen": [
        *_UINT,
        (0, R, "file read block length must be between 1 and 1048576"),
        (1048577, R, "file read block length must be between 1 and 1048576"),
    ],
    "argv": [
        ("ls", P, 'invalid type: string "ls", expected a sequence'),
        ([1], P, _NUMBER_NOT_STRING),
        ([], P, "argv must not be empty"),
    ],
    "texts": [
        ("x", P, 'invalid type: string "x", expected a sequence'),
        ([None], P, "invalid type: null, expected a string"),
    ],
    "map": [
        ([], P, "invalid type: sequence, expected a map"),
        ({"A": 1}, P, _NUMBER_NOT_STRING),
    ],
    "uri": [
        (1, P, _NUMBER_NOT_STRING),
        ("tmp/x", P, "invalid URI: relative URL without a base"),
        ("http://h/x", P, "unsupported path URI scheme `http`"),
        ("file://elsewhere/tmp", R, _WS_HOST),
        ("file:///C:/x", R, "'file:///C:/x' is invalid on 'linux'"),
    ],
    "cwd": [
        (1, P, _NUMBER_NOT_STRING),
        ("/tmp", P, "invalid URI: relative URL without a base"),
        ("ftp://h/tmp", P, "unsupported path URI scheme `ftp`"),
        ("file://elsewhere/tmp", P,
         f"cwd URI `file://elsewhere/tmp` is not valid on this exec-server host: {_WS_HOST}"),
    ],
    "b64": [
        (5, P, "invalid type: number, expected a string"),
        ("!!!!", P, "Invalid symbol 33, offset 0."),
        ("aGk", P, "Invalid padding"),
        ("ab=c", P, "Invalid symbol 61, offset 2."),  # padding before the end
        ("====", P, "Invalid symbol 61, offset 0."),
        ("aGkhé", P, "Invalid symbol 195, offset 4."),  # names the first UTF-8 byte
    ],
    "fsb64": [
        (5, P, "invalid type: number, expected a string"),
        ("!!!!", R, _FS_B64 + "Invalid symbol 33, offset 0."),
        ("aGk", R, _FS_B64 + "Invalid padding"),
        ("ab=c", R, _FS_B64 + "Invalid symbol 61, offset 2."),
    ],
    "signal": [
        (2, P, "invalid type: number, expected string or map"),
        ("kill", P, "unknown variant `kill`, expected `interrupt`"),
        ({"kill": None}, P, "unknown variant `kill`, expected `interrupt`"),
        ({"interrupt": None, "kill": None}, P,
         "invalid value: map, expected map with a single key"),
    ],
    "policy": [
        ("core", P, 'invalid type: string "core", expected struct ExecEnvPolicy'),
        ([], P, "invalid type: sequence, expected struct ExecEnvPolicy"),
    ],
    "inherit": [
        (1, P, _NUMBER_NOT_STRING),
        ("some", P, "unknown variant `some`, expected one of `core`, `all`, `none`"),
    ],
    "method": [
        *_TEXT,
        ("GET X", P, "http/request method is invalid: invalid HTTP method"),
        ("", P, "http/request method is invalid: invalid HTTP method"),
    ],
    "url": [
        *_TEXT,
        ("example.com", P, "http/request url is invalid: relative URL without a base"),
        ("ftp://h/", P, "http/request url is invalid: unsupported URL `ftp://h/`"),
        ("http:///x", P, "http/request url is invalid: unsupported URL `http:///x`"),
    ],
    "headers": [
        ({}, P, "invalid type: map, expected a sequence"),
        ([1], P, "invalid type: number, expected struct HttpHeader"),
        ([{"name": "a"}], P, "missing field `value`"),
        ([{"name": 1, "value": "v"}], P, _NUMBER_NOT_STRING),
    ],
    "redirect": [
        (1, P, "invalid type: number, expected string or map"),
        ("never", P, "unknown variant `never`, expected `follow` or `stop`"),
    ],
    "dim": [(value, P, "{field} must be an integer from 1 to 65535")
            for value in (0, 65536, 1.5, "24", True)],
    "port": [(value, P, "port must be an integer from 1 to 65535")
             for value in (0, 65536, 1.5, "80", True)],
    "host": [(value, P, "host must be an IP address or localhost")
             for value in ("", 1, "example.com", "[::1]")],
    "walk": [
        ("x", P, 'invalid type: string "x", expected struct WalkOptions'),
        ([1, 1, 1], P, "invalid length 3, expected struct WalkOptions with 5 elements"),
        ([1, 1, 1, True, False, 9], P, "invalid length 6, expected fewer elements in array"),
        ({"maxDepth": 1}, P, "missing field `maxDirectories`"),
        ({"maxDepth": -1, "maxDirectories": 1, "maxEntries": 1, "followDirectorySymlinks": True},
         P, "invalid number"),
        ({"maxDepth": 65, "maxDirectories": 1, "maxEntries": 1, "followDirectorySymlinks": True},
         R, "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"),
        ({"maxDepth": 1, "maxDirectories": 0, "maxEntries": 1, "followDirectorySymlinks": True},
         R, "filesystem walk limits must be greater than zero"),
    ],
    "block": [
        (5, P, "invalid type: number, expected a string"),
        ("!!!!", P, "Invalid symbol 33, offset 0."),
        ("aGk", P, "Invalid padding"),
        ("", R, "file write block length must be between 1 and 1048576"),
    ],
    "uris": [
        ("x", P, 'invalid type: string "x", expected a sequence'),
        ([1], P, _NUMBER_NOT_STRING),
        (["tmp/x"], P, "invalid URI: relative URL without a base"),
        (["file://elsewhere/tmp"], R, _WS_HOST),
        (["file:///tmp/x"] * 257, R, "fs/watchMissing watches at most 256 paths"),
    ],
    "keypaths": [
        ("x", P, 'invalid type: string "x", expected a sequence'),
        (["a"], P, 'invalid type: string "a", expected a sequence'),
        ([[1]], P, _NUMBER_NOT_STRING),
        ([[]], P, "TOML paths must contain at least one key segment"),
    ],
    "sandbox": [
        ("x", P, 'invalid type: string "x", expected struct WireFileSystemSandboxContext'),
        ({}, P, "missing field `permissions`"),
        ({"permissions": {"type": "nope"}, "windowsSandboxLevel": "disabled"}, P,
         "unknown variant `nope`, expected one of `managed`, `disabled`, `external`"),
        ({"permissions": {"type": "disabled"}}, P, "missing field `windowsSandboxLevel`"),
    ],
    "openmode": [
        (1, P, "invalid type: number, expected string or map"),
        ("write", P, "unknown variant `write`, expected `read` or `replace`"),
        ({"read": None, "replace": None}, P, "invalid value: map, expected map with a single key"),
        ({"read": 1}, P, "invalid type: number, expected unit"),
    ],
    "roots": [
        ("x", P, 'invalid type: string "x", expected a sequence'),
        ([1], P, "invalid type: number, expected struct WireCapabilityRoot"),
        ([{}], P, "missing field `id`"),
        ([{"id": "r"}], P, "missing field `path`"),
        ([{"id": "r", "path": "tmp/x"}], P, "invalid URI: relative URL without a base"),
    ],
}

ABSENT = object()  # no "params" key at all


def with_field(params: dict[str, Any], dotted: str, value: Any = ABSENT) -> dict[str, Any]:
    """A deep copy of ``params`` with field ``dotted`` set to ``value``, or removed (ABSENT)."""
    out = copy.deepcopy(params)
    *outer, name = dotted.split(".")
    target = out
    for key in outer:
        target = target[key]
    if value is ABSENT:
        del target[name]
    else:
        target[name] = value
    return out


def _label(value: Any) -> str:
    return json.dumps(value)[:24]


def sequence_error(method: str) -> str:
    """The error for params ``[1]``: a sequence where a struct is wanted, mostly."""
    return SEQUENCE.get(method, f"invalid type: sequence, expected {STRUCTS[method]}")


def params_cases(methods: list[str]) -> list[Any]:
    """For each method: params of the wrong shape; for each field: every wrong value of its
    kind, and for a required field null and the field missing."""
    cases = []
    for method in methods:
        struct_name = STRUCTS[method]
        shapes: list[tuple[Any, str]] = [
            ([1], sequence_error(method)),
            ("x", f'invalid type: string "x", expected {struct_name}'),
        ]
        if struct_name != "unit":  # a method that takes no params may omit them
            shapes.append((ABSENT, f"invalid type: null, expected {struct_name}"))
        for value, message in shapes:
            tag = "absent" if value is ABSENT else _label(value)
            cases.append(pytest.param(method, value, P, message, id=f"{method}:params={tag}"))
        for field, kind in METHODS[method].items():
            optional = kind.endswith("?")
            kind = kind.rstrip("?")
            name = field.rsplit(".", 1)[-1]
            for value, code, message in WRONG[kind]:
                cases.append(pytest.param(method, with_field(VALID[method], field, value), code,
                                          message.replace("{field}", name),
                                          id=f"{method}:{field}={_label(value)}"))
            if not optional:
                null = NULL.get(kind, f"invalid type: null, expected {WANTED.get(kind)}")
                null = null.replace("{field}", name)
                missing = f"missing field `{name}`"
                cases.append(pytest.param(method, with_field(VALID[method], field, None), P,
                                          null, id=f"{method}:{field}=null"))
                cases.append(pytest.param(method, with_field(VALID[method], field), P, missing,
                                          id=f"{method}:{field}-missing"))
    return cases


# -- the server, connections and frames ------------------------------------------------------------

_ids = itertools.count(1_000_000)  # above the Client's own ids, so replies cannot be confused


class Served:
    """One server for the module, and the initialized connection the matrix cases share."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.conn = server.client()


@pytest.fixture(scope="module", params=ADAPTERS)
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    server = Server(str(request.param))
    try:
        shared = Served(server)
    except BaseException:
        server.stop()  # no server left behind when the first connection fails
        raise
    yield shared
    shared.conn.close()
    log = server.stop()
    assert server.process.returncode == 0, log
    assert "Traceback" not in log, log


@pytest.fixture
def conn(served: Served) -> Client:
    # A case that closed the shared connection has failed already; give the next ones a new
    # connection so that the report names the culprit, not every case after it.
    if served.conn.closed is not None:
        served.conn = served.server.client()
    return served.conn


def peer(c: Client) -> str:
    """How the server names this connection in parse errors."""
    host, port = c.sock.getsockname()[:2]
    return f"websocket {host}:{port}"


def parse_error(c: Client, detail: str) -> dict[str, Any]:
    message = f"failed to parse JSON-RPC message from exec-server {peer(c)}: {detail}"
    return {"jsonrpc": "2.0", "id": -1, "error": {"code": PARSE, "message": message}}


def call(c: Client, method: str, params: Any = ABSENT, msg_id: Any = None) -> dict[str, Any]:
    """Send one request (``params`` exactly as given, or no params key) and await its reply."""
    msg_id = next(_ids) if msg_id is None else msg_id
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not ABSENT:
        message["params"] = params
    c.send(message)
    reply = c.response(msg_id)
    assert reply["id"] == msg_id and type(reply["id"]) is type(msg_id), reply
    return reply


def error(code: int, message: str, msg_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def assert_serving(c: Client) -> None:
    """The connection still answers a valid request, and nothing else arrived meanwhile."""
    reply = call(c, "environment/info")
    assert reply["result"]["platformOs"] == "linux", reply
    assert c.inbox == [], c.inbox


def masked_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A client frame built by hand: wsproto will not put invalid UTF-8 in a text frame."""
    mask = os.urandom(4)  # client frames must be masked (RFC 6455 5.3), or that is the error
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


TEXT, CONTINUATION = 0x1, 0x0


def close_code(c: Client) -> int:
    """Read until the server ends the connection; it must send no message first."""
    try:
        message = c.recv(timeout=10)
    except Closed as closed:
        assert closed.code is not None
        return closed.code
    except ConnectionResetError:
        return 1006  # dropped without a close frame, as a reset
    raise AssertionError(f"expected the connection to close, got {message}")


# -- 1. frames that are not messages ---------------------------------------------------------------

PARSE_CASES = [
    # Not JSON: the detail is the JSON decoder's text (docs/protocol.md, Framing).
    ("not json", "Expecting value: line 1 column 1 (char 0)"),
    ("", "Expecting value: line 1 column 1 (char 0)"),
    ("   ", "Expecting value: line 1 column 4 (char 3)"),
    ('{"id": 1, "method": "environment/info"',
     "Expecting ',' delimiter: line 1 column 39 (char 38)"),
    ("{", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("{'id': 1, 'method': 'environment/info'}",
     "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('{"id":1,"method":"environment/info"}{}', "Extra data: line 1 column 37 (char 36)"),
    ('\ufeff{"id":1,"method":"environment/info"}',
     "Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)"),
    # JSON, but not an object.
    ("[]", NOT_AN_OBJECT),
    ('[{"id":1,"method":"environment/info"}]', NOT_AN_OBJECT),  # no batches
    ("42", NOT_AN_OBJECT),
    ("-1.5e3", NOT_AN_OBJECT),
    ('"environment/info"', NOT_AN_OBJECT),
    ("null", NOT_AN_OBJECT),
    ("true", NOT_AN_OBJECT),
    # An object, but no message.
    ("{}", "missing field `method`"),
    ('{"id":1}', "missing field `method`"),
    ('{"id":1,"method":7}', "invalid type: number, expected a string"),
    ('{"id":1,"method":["environment/info"]}', "invalid type: sequence, expected a string"),
    ('{"id":1,"method":true}', "invalid type: boolean `true`, expected a string"),
    ('{"method":{}}', "invalid type: map, expected a string"),  # a would-be notification
    # Ids that are no RequestId: answered with -1, not with the id.
    ('{"id":null,"method":"environment/info"}', BAD_ID),
    ('{"id":1.5,"method":"environment/info"}', BAD_ID),
    ('{"id":1.0,"method":"environment/info"}', BAD_ID),
    ('{"id":true,"method":"environment/info"}', BAD_ID),
    ('{"id":{},"method":"environment/info"}', BAD_ID),
    ('{"id":[1],"method":"environment/info"}', BAD_ID),
]


@pytest.mark.parametrize(("frame", "detail"), PARSE_CASES,
                         ids=[repr(frame[:30]) for frame, _ in PARSE_CASES])
def test_a_frame_that_is_no_message_gets_a_parse_error(conn: Client, frame: str,
                                                       detail: str) -> None:
    conn.send_raw(frame)
    assert conn.response(-1) == parse_error(conn, detail)
    assert_serving(conn)


# -- 2. wrong params, for every field of every method ----------------------------------------------

_MATRIX_METHODS = [method for method in METHODS if method != "initialize"]


@pytest.mark.parametrize(("method", "params", "code", "message"), params_cases(_MATRIX_METHODS))
def test_a_bad_param_gets_its_error(conn: Client, method: str, params: Any, code: int,
                                    message: str) -> None:
    msg_id = next(_ids)
    assert call(conn, method, params, msg_id) == error(code, message, msg_id)
    assert_serving(conn)


@pytest.mark.parametrize(("method", "params", "code", "message"), params_cases(["initialize"]))
def test_a_bad_initialize_gets_its_error_and_does_not_count(served: Served, method: str,
                                                            params: Any, code: int,
                                                            message: str) -> None:
    # A connection of its own: on the shared one, initialize is refused for being the second.
    c = served.server.client(handshake=False)
    try:
        msg_id = next(_ids)
        assert call(c, method, params, msg_id) == error(code, message, msg_id)
        assert "result" in c.handshake()  # the failed initialize did not count
        assert_serving(c)
    finally:
        c.close()


def test_params_are_checked_before_the_handshake(served: Served) -> None:
    c = served.server.client(handshake=False)
    try:
        for method in _MATRIX_METHODS:
            msg_id = next(_ids)
            assert call(c, method, [1], msg_id) == error(P, sequence_error(method), msg_id), method
        # Good params on the same connection get the handshake error, so the order is proven.
        msg_id = next(_ids)
        early = "client must call initialize before using environment info methods"
        assert call(c, "environment/info", {}, msg_id) == error(R, early, msg_id)
        assert "result" in c.handshake()
        assert_serving(c)
    finally:
        c.close()


def test_an_unknown_method_gets_32601_whatever_its_params(conn: Client) -> None:
    for params in (ABSENT, [1], "x", {"processId": 5}):
        msg_id = next(_ids)
        message = "exec-server stub does not implement `process/kill` yet"
        assert call(conn, "process/kill", params, msg_id) == error(-32601, message, msg_id)
    assert_serving(conn)


# -- 3. huge ids -----------------------------------------------------------------------------------

ECHOED_IDS: list[Any] = [2**63 - 1, -(2**63), "x" * 10_000, "", "\U0001f600", 0, -1]


@pytest.mark.parametrize("msg_id", ECHOED_IDS, ids=["i64max", "i64min", "str10000", "empty",
                                                    "surrogate-pair", "zero", "minus-one"])
def test_an_id_within_the_rules_is_echoed_exactly(conn: Client, msg_id: Any) -> None:
    assert call(conn, "environment/info", {}, msg_id)["result"]["platformOs"] == "linux"
    wanted = 'invalid type: string "x", expected unit'
    assert call(conn, "environment/info", "x", msg_id) == error(P, wanted, msg_id)
    assert_serving(conn)


@pytest.mark.parametrize("raw_id", [str(2**63), str(-(2**63) - 1), str(2**64), "1" + "0" * 100])
def test_an_integer_id_beyond_i64_is_a_parse_error(conn: Client, raw_id: str) -> None:
    conn.send_raw('{"id":' + raw_id + ',"method":"environment/info"}')
    assert conn.response(-1) == parse_error(conn, BAD_ID)
    assert_serving(conn)


def test_an_integer_id_too_long_to_convert_is_a_parse_error(conn: Client) -> None:
    # Past Python's int-conversion limit (4300 digits) the decoder itself fails, with its own
    # wording (not the RequestId message): assert the stable part.
    conn.send_raw('{"id":' + "9" * 5000 + ',"method":"environment/info"}')
    reply = conn.response(-1)
    prefix = parse_error(conn, "")["error"]["message"]
    assert reply["error"]["code"] == PARSE, reply
    assert reply["error"]["message"].startswith(prefix), reply
    assert "digits" in reply["error"]["message"], reply
    assert_serving(conn)


# -- 4. deeply nested JSON -------------------------------------------------------------------------

DEEP = 100_000


def nest(depth: int, inner: str = "1", kind: str = "array") -> str:
    if kind == "array":
        return "[" * depth + inner + "]" * depth
    return '{"a":' * depth + inner + "}" * depth


@pytest.mark.parametrize(("frame", "kind"), [
    (nest(DEEP), "array"),
    (nest(DEEP, kind="object"), "object"),
    ('{"id":1,"method":"environment/info","params":{"x":' + nest(DEEP) + "}}", "array"),
    ('{"id":2,"method":"process/read","params":{"processId":' + nest(DEEP, kind="object") + "}}",
     "object"),
    ('{"id":' + nest(DEEP) + ',"method":"environment/info"}', "array"),
], ids=["whole-array", "whole-object", "in-params", "in-a-field", "as-the-id"])
def test_deep_nesting_is_a_parse_error(conn: Client, frame: str, kind: str) -> None:
    # The decoder gives up at its recursion limit: a parse error (id -1, the frame was never
    # read as a message), whose detail is Python's RecursionError text.
    conn.send_raw(frame)
    reply = conn.response(-1)
    prefix = parse_error(conn, "")["error"]["message"]
    assert reply["error"]["code"] == PARSE, reply
    assert reply["error"]["message"].startswith(prefix), reply
    assert "recursion" in reply["error"]["message"], reply
    assert f"JSON {kind}" in reply["error"]["message"], reply
    assert_serving(conn)


def test_moderate_nesting_is_read_and_checked_as_usual(conn: Client) -> None:
    # 100 levels, within any JSON parser's limit (serde_json's is 128).
    msg_id = next(_ids)
    deep = json.loads(nest(100))
    # A method of no params refuses any field, as the reference does, however deep.
    refused = error(P, "invalid type: map, expected unit", msg_id)
    assert call(conn, "environment/info", {"x": deep}, msg_id) == refused
    assert "result" in call(conn, "process/terminate", {"processId": "ghost", "x": deep}, msg_id)
    wanted = "invalid type: sequence, expected a string"
    assert call(conn, "process/read", {"processId": deep}, msg_id) == error(P, wanted, msg_id)
    assert_serving(conn)


# -- 5. invalid base64 is in the matrix (kinds "b64" and "fsb64"); one more, end to end ------------

def test_bad_base64_writes_nothing(conn: Client, tmp_path: Path) -> None:
    target = tmp_path / "never"
    msg_id = next(_ids)
    reply = call(conn, "fs/writeFile", {"path": uri(target), "dataBase64": "aGkh!"}, msg_id)
    assert reply == error(R, _FS_B64 + "Invalid symbol 33, offset 4.", msg_id)
    assert not target.exists()
    assert_serving(conn)


# -- 6. invalid UTF-8 ------------------------------------------------------------------------------

_INFO = b'{"id":1,"method":"environment/info"'
BAD_UTF8_TEXT = {
    "lone-ff": [masked_frame(TEXT, b"\xff")],
    "in-a-string": [masked_frame(TEXT, _INFO + b',"params":{"x":"\xc3\x28"}}')],
    "encoded-surrogate": [masked_frame(TEXT, _INFO + b',"params":{"x":"\xed\xa0\x80"}}')],
    "overlong": [masked_frame(TEXT, _INFO + b',"params":{"x":"\xc0\xaf"}}')],
    "truncated-at-end": [masked_frame(TEXT, _INFO + b"}\xe2\x82")],
    "in-a-later-fragment": [masked_frame(TEXT, _INFO, fin=False),
                            masked_frame(CONTINUATION, b',"params":{"x":"\xff"}}')],
}


@pytest.mark.parametrize("frames", list(BAD_UTF8_TEXT.values()), ids=list(BAD_UTF8_TEXT))
def test_invalid_utf8_in_a_text_frame_fails_that_connection_only(served: Served,
                                                                 frames: list[bytes]) -> None:
    # RFC 6455 8.1: the endpoint MUST fail the connection, and says why with close 1007
    # (7.1.7). A reply, or the connection staying open, would be wrong.
    c = served.server.client()
    c.sock.sendall(b"".join(frames))
    assert close_code(c) == 1007
    c.sock.close()
    assert_serving(served.conn)  # other connections are untouched
    fresh = served.server.client()
    assert_serving(fresh)
    fresh.close()


def test_a_character_split_across_fragments_is_fine(conn: Client) -> None:
    # The UTF-8 check is per message, not per frame: the control for the cases above.
    msg_id = next(_ids)
    body = b'{"id":%d,"method":"process/read","params":{"processId":"\xc3\xa9"}}' % msg_id
    cut = body.index(b"\xc3") + 1  # between the two bytes of the "é"
    conn.sock.sendall(masked_frame(TEXT, body[:cut], fin=False)
                      + masked_frame(CONTINUATION, body[cut:]))
    assert conn.response(msg_id) == error(R, "unknown process id é", msg_id)
    assert_serving(conn)


def test_invalid_utf8_in_a_binary_frame_is_a_parse_error(conn: Client) -> None:
    # Binary frames carry bytes, so no websocket rule is broken: the JSON decoder rejects them.
    conn.send_raw(_INFO + b',"params":{"x":"\xff"}}')
    detail = "'utf-8' codec can't decode byte 0xff in position 51: invalid start byte"
    assert conn.response(-1) == parse_error(conn, detail)
    assert_serving(conn)


# -- 7. unknown fields -----------------------------------------------------------------------------

EXTRA = {"noSuchField": [1, {"deep": None}], "alsoUnknown": "x", "": 0}


def test_unknown_fields_change_nothing(conn: Client) -> None:
    # A bound socket that does not listen refuses connections: a fixed, local failure.
    refuser = socket.socket()
    refuser.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{refuser.getsockname()[1]}/"
    here = uri(Path(__file__).resolve())
    # (environment/info takes no params at all: a field there is refused, as the reference does.)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("process/read", {"processId": "ghost", "afterSeq": 0}),  # an error both times
        ("process/write", {"processId": "ghost", "chunk": "aGk=", "writeId": "w1"}),
        ("process/signal", {"processId": "ghost", "signal": "interrupt"}),
        ("process/terminate", {"processId": "ghost"}),
        ("process/ack", {"processId": "ghost", "seq": 1}),
        ("fs/getMetadata", {"path": here}),
        ("fs/readBlock", {"handleId": "ghost", "offset": 0, "len": 1}),
        ("fs/close", {"handleId": "ghost"}),
        ("http/request", {"method": "GET", "url": url, "requestId": "r1",
                          "headers": [{"name": "x-a", "value": "1"}]}),
    ]
    try:
        for method, params in calls:
            plain = call(conn, method, params)
            # Were unknown fields refused, the noisy call would get -32602: the plain one must not.
            assert plain.get("error", {}).get("code") != P, plain
            noisy = {**params, **EXTRA}
            if method == "http/request":
                noisy["headers"] = [{"name": "x-a", "value": "1", "sensitive": True}]
            extra = call(conn, method, noisy)
            plain.pop("id")
            extra.pop("id")
            assert extra == plain, method
    finally:
        refuser.close()
    assert_serving(conn)


def test_unknown_fields_in_the_envelope_are_ignored(conn: Client) -> None:
    msg_id = next(_ids)
    conn.send({"jsonrpc": "1.0", "id": msg_id, "method": "environment/info", "params": {},
               "meta": {"trace": [1, 2]}, "result": None})
    # "result" beside a method does not make it a response: the method decides.
    assert conn.response(msg_id)["result"]["platformOs"] == "linux"
    assert_serving(conn)


def test_unknown_fields_on_process_start_and_its_env_policy(conn: Client) -> None:
    base = {"argv": ["sh", "-c", "exit 3"], "cwd": "file:///tmp", "env": {}, "tty": False,
            "envPolicy": dict(_POLICY)}
    noisy = {**with_field(base, "envPolicy.unknownKnob", True), **EXTRA}
    results = []
    for process_id, params in (("bad-input-plain", base), ("bad-input-extra", noisy)):
        reply = call(conn, "process/start", {"processId": process_id, **params})
        assert reply["result"]["processId"] == process_id, reply
        events = conn.events_until_closed(process_id)
        exited = [e["params"]["exitCode"] for e in events if e["method"] == "process/exited"]
        results.append((reply["result"]["sandboxType"], exited))
    assert results[0] == results[1], results
    assert results[0][1] == [3], results
    assert_serving(conn)


def test_unknown_fields_on_initialize_are_ignored(served: Served) -> None:
    c = served.server.client(handshake=False)
    try:
        params = {"clientName": "bad-input", "capabilities": {"x": True}, "protocolVersion": 9}
        result = call(c, "initialize", params)["result"]
        assert sorted(result) == ["environmentInfo", "execproto", "sessionId"]  # no outputAcks
        c.send({"jsonrpc": "2.0", "method": "initialized", "params": {"extra": 1}})
        assert_serving(c)
    finally:
        c.close()


# -- frames that close the connection by design (docs/protocol.md, Framing) ------------------------

@pytest.mark.parametrize("frame", [
    '{"id":5,"result":{}}',
    '{"id":5,"error":{"code":1,"message":"x"}}',
    '{"method":"initialized"}',  # before initialize
], ids=["response", "error-response", "early-initialized"])
def test_a_frame_that_closes_by_design_closes_with_1002(served: Served, frame: str) -> None:
    c = served.server.client(handshake=False)
    c.send_raw(frame)
    assert close_code(c) == 1002
    c.sock.close()
    assert_serving(served.conn)


# -- Python's JSON extensions are not JSON ---------------------------------------------------------


def test_nan_and_infinity_are_not_json(conn: Client) -> None:
    conn.send_raw('{"id":11,"method":"environment/info","params":{"x":NaN,"y":-Infinity}}')
    reply = conn.recv()
    assert reply["id"] == -1 and reply["error"]["code"] == PARSE, reply
