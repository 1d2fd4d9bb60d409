"""Strict standard base64 (with padding), with the reference's error messages.

Decoding is one pass in C (binascii's strict mode), so a stream of stdin writes costs the
owner thread little; only input it refuses is looked at again, by a regular expression and a
count, to say where it went wrong (a client author debugging a bad write wants the offset).
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable

from ._errors import RpcError, invalid_params

_OUTSIDE = re.compile(rb"[^A-Za-z0-9+/]")
_PAD = ord("=")


def error(text: str) -> str | None:
    """Why ``text`` is not valid padded base64, or None when it is."""
    raw = text.encode("utf-8", "surrogatepass")
    found = _OUTSIDE.search(raw)
    if found is not None:
        offset = found.start()
        # Padding may only fill the last one or two places of the final quad.
        padding = raw[offset] == _PAD and offset % 4 >= 2 and raw.count(b"=", offset) == (
            len(raw) - offset)
        if not padding:
            return f"Invalid symbol {raw[offset]}, offset {offset}."
    if len(raw) % 4:
        return "Invalid padding"
    return None


def decode(text: str) -> bytes:
    """Decode ``text``, or raise -32602 with the reference's message."""
    return decode_or_raise(text, invalid_params)


def decode_or_raise(text: str, fail: Callable[[str], RpcError]) -> bytes:
    # Strict mode takes padding after a whole quad ("YWJj=", "YWJj===="), which the reference
    # refuses: padding is only ever in the last two places of a length divisible by four.
    if len(text) % 4 == 0 and text.find("=", 0, len(text) - 2) == -1:
        try:
            return binascii.a2b_base64(text, strict_mode=True)
        except ValueError:  # binascii.Error, or a str that is not ASCII
            pass
    raise fail(error(text) or "Invalid padding")
