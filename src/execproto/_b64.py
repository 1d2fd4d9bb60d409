"""Strict standard base64 (with padding), with the reference's error messages.

``base64.b64decode(validate=True)`` accepts the same inputs, but its errors do not say where the
input went wrong; a client author debugging a bad write wants the offset.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from ._errors import RpcError, invalid_params

_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_PAD = ord("=")


def error(text: str) -> str | None:
    """Why ``text`` is not valid padded base64, or None when it is."""
    raw = text.encode("utf-8", "surrogatepass")
    for offset, byte in enumerate(raw):
        if byte in _ALPHABET:
            continue
        # Padding may only fill the last one or two places of the final quad.
        if byte == _PAD and offset % 4 >= 2 and all(b == _PAD for b in raw[offset:]):
            break
        return f"Invalid symbol {byte}, offset {offset}."
    if len(raw) % 4:
        return "Invalid padding"
    return None


def decode(text: str) -> bytes:
    """Decode ``text``, or raise -32602 with the reference's message."""
    return decode_or_raise(text, invalid_params)


def decode_or_raise(text: str, fail: Callable[[str], RpcError]) -> bytes:
    problem = error(text)
    if problem is None:
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):  # pragma: no cover - error() admits only valid input
            problem = "Invalid padding"
    raise fail(problem)
