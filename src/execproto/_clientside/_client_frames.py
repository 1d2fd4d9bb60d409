"""What the client core reads of the server's frames, checked before it acts on any of it.

A frame that fails the check is the server's mistake: it becomes `ServerMisbehaved` (and fails
the call it answers, if any), and nothing of it is applied. So an exception while the core acts
on a frame that passed is the core's own bug, never blamed on the server: it stops the core
(``ClientState.ERROR``), as h11's ERROR state does.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

_Shape = dict[str, tuple[type, ...]]

_INT: tuple[type, ...] = (int,)
_TEXT: tuple[type, ...] = (str,)
_FLAG: tuple[type, ...] = (bool,)
_MAYBE_INT: tuple[type, ...] = (int, type(None))
_MAYBE_TEXT: tuple[type, ...] = (str, type(None))

# The params each notification must have, and their types (a bool is not an int here).
NOTIFICATIONS: dict[str, _Shape] = {
    "process/output": {"processId": _TEXT, "seq": _INT, "stream": _TEXT, "chunk": _TEXT},
    "process/exited": {"processId": _TEXT, "seq": _INT, "exitCode": _MAYBE_INT},
    "process/closed": {"processId": _TEXT, "seq": _INT},
    "http/request/bodyDelta": {"requestId": _TEXT, "seq": _INT, "done": _FLAG},
}
_OPTIONAL_NOTIFICATION: _Shape = {"deltaBase64": _MAYBE_TEXT, "error": _MAYBE_TEXT}
_ERROR: _Shape = {"code": _INT, "message": _TEXT}
_SESSION: _Shape = {"sessionId": _TEXT}
_WINDOW: _Shape = {"bytes": _INT, "chunks": _INT}
_READ: _Shape = {"nextSeq": _INT, "chunks": (list,), "closed": _FLAG, "exited": _FLAG}
_READ_OPTIONAL: _Shape = {"exitCode": _MAYBE_INT, "failure": _MAYBE_TEXT}
_CHUNK: _Shape = {"seq": _INT, "stream": _TEXT, "chunk": _TEXT}


class Malformed(ValueError):
    """A server's frame the client core cannot act on; the text says what is wrong."""


def parsed(data: bytes | str) -> dict[str, Any]:
    """A frame as the JSON object it must be."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's depth
        raise Malformed(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise Malformed("not a JSON-RPC object")
    return message


def method(message: dict[str, Any]) -> str:
    """A notification's method (a list there would not even be a key to look up)."""
    name = message["method"]
    if not isinstance(name, str):
        raise Malformed(f"a notification's method is {type(name).__name__}")
    return name


def answer_id(message: dict[str, Any]) -> int | str | None:
    """An answer's id: the client's ids are ints, but a server may answer with any id it was
    sent, and with none (null, or -1 as the reference does) when it could not read the frame."""
    found = message.get("id")
    if isinstance(found, bool) or not isinstance(found, (int, str, type(None))):
        raise Malformed(f"an answer's id is {type(found).__name__}")
    return found


def fields(value: Any, shape: _Shape, where: str, optional: _Shape | None = None
           ) -> dict[str, Any]:
    """``value`` as a dict holding ``shape``'s fields (and, if there, ``optional``'s)."""
    if not isinstance(value, dict):
        raise Malformed(f"{where} is not an object")
    for name, kinds in shape.items():
        if name not in value:
            raise Malformed(f"{where} has no {name}")
        _typed(value[name], kinds, f"{where}.{name}")
    for name, kinds in (optional or {}).items():
        if name in value:
            _typed(value[name], kinds, f"{where}.{name}")
    return value


def _typed(value: Any, kinds: tuple[type, ...], where: str) -> None:
    if isinstance(value, bool) and bool not in kinds:
        raise Malformed(f"{where} is {value!r}, not {_names(kinds)}")
    if not isinstance(value, kinds):
        raise Malformed(f"{where} is {type(value).__name__}, not {_names(kinds)}")


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join("null" if kind is type(None) else kind.__name__ for kind in kinds)


def notification(method: str, params: Any) -> dict[str, Any]:
    """The params of a notification of ``method`` (one of NOTIFICATIONS)."""
    return fields(params, NOTIFICATIONS[method], method, _OPTIONAL_NOTIFICATION)


def error(message: dict[str, Any]) -> dict[str, Any]:
    return fields(message["error"], _ERROR, "error")


def result(message: dict[str, Any]) -> Any:
    if "result" not in message:
        raise Malformed("an answer with neither result nor error")
    return message["result"]


def session(message: dict[str, Any], acks: bool) -> dict[str, Any]:
    """The result of an ``initialize``."""
    found = fields(result(message), _SESSION, "initialize result")
    window = found.get("outputAcks")
    if acks and window:
        fields(window, _WINDOW, "outputAcks")
    return found


def read(message: dict[str, Any]) -> dict[str, Any]:
    """The result of a ``process/read``, its chunks checked too."""
    found = fields(result(message), _READ, "process/read result", _READ_OPTIONAL)
    if found["exited"] and "exitCode" not in found:
        raise Malformed("process/read result has exited but no exitCode")
    for index, chunk in enumerate(found["chunks"]):
        fields(chunk, _CHUNK, f"chunks[{index}]")
    return found


def decoded(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Malformed(f"{where} is not base64: {exc}") from None
