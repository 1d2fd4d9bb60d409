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

from ._errors import INVALID_REQUEST, RpcError

Id = str | int

# The id used to answer a frame whose own id could not be read.
UNKNOWN_ID = -1

_dumps = json.JSONEncoder(separators=(",", ":")).encode


@attrs.frozen
class Incoming:
    """A request (``id`` set) or a notification (``id`` None)."""

    method: str
    params: Any
    id: Id | None


@attrs.frozen
class Malformed:
    """A frame that is not a usable request; ``id`` is what to answer with, if anything."""

    id: Id | None
    error: RpcError


def _valid_id(value: object) -> bool:
    # bool is an int subclass, but true/false is not a JSON-RPC id.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse(data: bytes | str) -> Incoming | Malformed | None:
    """Decode one frame. None means "nothing to answer" (a response from the client)."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad JSON, bad UTF-8 and over-long integers.
        return Malformed(UNKNOWN_ID, RpcError(INVALID_REQUEST, f"invalid JSON-RPC message: {exc}"))
    if not isinstance(message, dict):
        return Malformed(
            UNKNOWN_ID, RpcError(INVALID_REQUEST, "invalid JSON-RPC message: expected an object")
        )
    has_id = "id" in message
    msg_id = message.get("id")
    if has_id and not _valid_id(msg_id):
        return Malformed(
            UNKNOWN_ID,
            RpcError(INVALID_REQUEST, "invalid JSON-RPC message: id must be a string or an integer"),
        )
    method = message.get("method")
    if method is None:
        if has_id and ("result" in message or "error" in message):
            return None  # a response: the server sends no requests, so nothing waits for it
        return Malformed(
            msg_id if has_id else UNKNOWN_ID,
            RpcError(INVALID_REQUEST, "invalid JSON-RPC message: missing method"),
        )
    if not isinstance(method, str):
        return Malformed(
            msg_id if has_id else UNKNOWN_ID,
            RpcError(INVALID_REQUEST, "invalid JSON-RPC message: method must be a string"),
        )
    return Incoming(method=method, params=message.get("params"), id=msg_id if has_id else None)


def encode_result(msg_id: Id, result: Any) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}).encode("ascii")


def encode_error(msg_id: Id, error: RpcError) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": msg_id, "error": error.to_json()}).encode("ascii")


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
