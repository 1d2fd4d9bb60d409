"""Redaction for traces: process output and stdin become filler of the same length.

A redacted trace still replays: the core never looks inside the bytes it forwards, so the same
events with filler in place of the payloads give the same actions with filler in them. Every
place a payload appears is rewritten the same way: ``OutputReceived.data`` and
``WriteStdin.data`` directly, and inside JSON frames every ``"chunk"`` string (output
notifications, read results, ``process/write`` params) that is valid base64.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import attrs

from ._actions import Send, WriteStdin
from ._events import MessageReceived, OutputReceived

FILLER = b"x"

_CHUNK = re.compile(rb'("chunk"\s*:\s*")([A-Za-z0-9+/=]*)(")')


def filler(size: int) -> bytes:
    return FILLER * size


def _chunk(match: re.Match[bytes]) -> bytes:
    text = match.group(2)
    try:
        size = len(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        return match.group(0)  # not base64: the core refuses it, and says why; keep it as is
    return match.group(1) + base64.b64encode(filler(size)) + match.group(3)


def redact_frame(data: bytes | str) -> bytes | str:
    if isinstance(data, str):
        encoded = data.encode("utf-8", "surrogatepass")
        return _CHUNK.sub(_chunk, encoded).decode("utf-8", "surrogatepass")
    return redact_bytes(data)


def redact_bytes(data: bytes) -> bytes:
    return _CHUNK.sub(_chunk, data)


def redact(value: Any) -> Any:
    """An event or action with its payloads replaced; anything else as it is."""
    if isinstance(value, OutputReceived):
        return attrs.evolve(value, data=filler(len(value.data)))
    if isinstance(value, WriteStdin):
        return attrs.evolve(value, data=filler(len(value.data)))
    if isinstance(value, MessageReceived):
        return attrs.evolve(value, data=redact_frame(value.data))
    if isinstance(value, Send):
        return attrs.evolve(value, data=redact_bytes(value.data))
    return value
