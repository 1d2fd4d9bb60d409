"""JSON-RPC 2.0 framing: one message in, one message out, no transport.

Outgoing messages are UTF-8 JSON bytes. ``ensure_ascii`` keeps any lone surrogate a client sent
(and that we echo back, e.g. in an id) encodable. The hot notification, ``process/output``, is
spliced into a prebuilt template: base64 needs no JSON escaping, so the chunk is never passed
through the JSON encoder.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from ._errors import RpcError
from ._records import Record
from .events import Encoded

Id = str | int

# The id used to answer a frame that could not be read as a message.
UNKNOWN_ID = -1

_dumps = json.JSONEncoder(separators=(",", ":")).encode


@attrs.frozen(repr=False, eq=False)
class Incoming(Record):
    """A request (``id`` set) or a notification (``id`` None)."""

    method: str
    params: Any
    id: Id | None


@attrs.frozen(repr=False, eq=False, slots=False)
class Malformed(Record):
    """A frame that is not a message; answered with id -1 and ``detail`` in the message."""

    detail: str


@attrs.frozen(repr=False, eq=False, slots=False)
class ClientResponse(Record):
    """A response from the client, to one of the server's requests (``network/policyRequest``)
    or to nothing: ``result`` as sent, or ``error`` (the error object) if it failed."""

    id: Id
    result: Any = None
    error: Any = None


def describe(value: Any) -> str:
    """How the reference's deserializer names an unexpected JSON value in its messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string " + json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "sequence"
    return "map"


_I64 = range(-(2**63), 2**63)


def _valid_id(value: object) -> bool:
    # bool is an int subclass, but true/false is no id; ids are i64 on the reference's side.
    if isinstance(value, bool):
        return False
    return isinstance(value, str) or (isinstance(value, int) and value in _I64)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= char <= "\udfff" for char in value)
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate(item) for item in value)
    return False


# The most values (objects, arrays and the items between commas) one message may hold. Parsing
# costs memory by the value, up to a hundred bytes each, so a message is weighed before it is
# parsed: a 57 MiB array of empty objects would take 1.5 GB. Every real request holds a few
# hundred; a large write is one long string, one value.
MAX_VALUES = 1_000_000


def _weight(data: bytes | str) -> int:
    """An upper bound on the values in ``data``: each one past the first follows a comma or
    opens a container (a string holding them only makes the bound loose)."""
    if isinstance(data, bytes):
        return data.count(b",") + data.count(b"[") + data.count(b"{")
    return data.count(",") + data.count("[") + data.count("{")


def parse(data: bytes | str) -> Incoming | Malformed | ClientResponse:
    """Decode one frame."""
    # No message shorter than the bound can pass it: most are not counted at all.
    if len(data) > MAX_VALUES and _weight(data) > MAX_VALUES:
        return Malformed(f"a message may hold at most {MAX_VALUES} values")
    try:
        # A binary frame is UTF-8 like a text frame (json.loads would also guess UTF-16 and
        # UTF-32 from the bytes), and NaN and Infinity are Python's extensions, not JSON.
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        message = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad JSON, bad UTF-8 and integers too long to convert.
        return Malformed(str(exc) or type(exc).__name__)
    except MemoryError:  # what this message needs, not a fault of the server's
        return Malformed("out of memory parsing the message")
    # A "\ud800" escape with no partner decodes to a lone surrogate, which no OS call, file
    # name or UTF-8 encoder takes: JSON (RFC 8259) allows it, strict parsers such as the
    # reference's refuse it, and so does this one. Only an escape can make one.
    try:
        # One scan for a backslash-u (a write's base64 has none), then the closer look.
        if "\\u" in text and ("\\ud" in text or "\\uD" in text) and _lone_surrogate(message):
            return Malformed("unexpected end of hex escape")
    except RecursionError:
        return Malformed("recursion limit exceeded")
    if not isinstance(message, dict):
        return Malformed("expected a JSON-RPC object")
    if "id" in message and not _valid_id(message["id"]):
        return Malformed("data did not match any variant of untagged enum RequestId")
    method = message.get("method")
    if method is None:
        if "id" in message and ("result" in message or "error" in message):
            return ClientResponse(message["id"], message.get("result"), message.get("error"))
        return Malformed("missing field `method`")
    if not isinstance(method, str):
        return Malformed(f"invalid type: {describe(method)}, expected a string")
    return Incoming(method=method, params=message.get("params"), id=message.get("id"))


def encode_result(msg_id: Id, result: Any) -> bytes:
    if isinstance(result, Encoded):  # already JSON: spliced in, never parsed again
        return f'{{"jsonrpc":"2.0","id":{_dumps(msg_id)},"result":{result.text}}}'.encode("ascii")
    return _dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}).encode("ascii")


def encode_error(msg_id: Id, error: RpcError) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": msg_id, "error": error.to_json()}).encode("ascii")


def encode_request(msg_id: int, method: str, params: Any) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                   "params": params}).encode("ascii")


def encode_notification(method: str, params: Any) -> bytes:
    return _dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode("ascii")


def output_prefix(process_id: str, stream: str) -> bytes:
    """Everything of a ``process/output`` notification up to its seq; see `encode_output`."""
    head = _dumps({"processId": process_id, "stream": stream})
    return ('{"jsonrpc":"2.0","method":"process/output","params":' + head[:-1] + ',"seq":').encode(
        "ascii"
    )


def encode_output(prefix: bytes, seq: int, chunk_b64: bytes) -> bytes:
    return b'%b%d,"chunk":"%b"}}' % (prefix, seq, chunk_b64)
