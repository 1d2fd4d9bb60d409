"""Strict base64: the fast check says what a byte-by-byte reading says, on every input."""

from __future__ import annotations

import base64
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from execproto._b64 import decode, error
from execproto._errors import RpcError

TEXT = st.text(alphabet="QUJDab01+/=\n -_é", max_size=24)


@given(TEXT)
def test_decoding_succeeds_exactly_when_no_error_is_found(text: str) -> None:
    try:
        decoded = decode(text)
    except RpcError as exc:
        assert error(text) is not None
        assert exc.message == error(text) or exc.message == "Invalid padding"
        return
    assert error(text) is None
    assert decoded == base64.b64decode(text, validate=True)


@pytest.mark.parametrize(("text", "message"), [
    ("QQ=A", "Invalid symbol 61, offset 2."),
    ("QQ", "Invalid padding"),
    ("Q===", "Invalid symbol 61, offset 1."),
    ("QQ==QQ==", "Invalid symbol 61, offset 2."),
    ("QUJD\n", "Invalid symbol 10, offset 4."),
    ("YWJj=", "Invalid symbol 61, offset 4."),  # the reference's word for padding after a quad
])
def test_the_reference_messages(text: str, message: str) -> None:
    assert error(text) == message
    with pytest.raises(RpcError) as raised:
        decode(text)
    assert raised.value.message == message


def test_a_large_write_and_its_error_at_the_end_are_found() -> None:
    data = bytes(range(256)) * 4096
    text = base64.b64encode(data).decode()
    assert decode(text) == data
    assert error(text[:-4] + "QQ!=") == f"Invalid symbol 33, offset {len(text) - 2}."


_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _byte_by_byte(text: str) -> str | None:
    """The reading the regular expression replaced, kept here as the definition."""
    raw = text.encode("utf-8", "surrogatepass")
    for offset, byte in enumerate(raw):
        if byte in _ALPHABET:
            continue
        if byte == ord("=") and offset % 4 >= 2 and all(b == ord("=") for b in raw[offset:]):
            break
        return f"Invalid symbol {byte}, offset {offset}."
    return "Invalid padding" if len(raw) % 4 else None


def test_every_short_input_is_judged_as_byte_by_byte() -> None:
    for size in range(7):
        for letters in itertools.product("QY=\n+é", repeat=size):
            text = "".join(letters)
            assert error(text) == _byte_by_byte(text), text
