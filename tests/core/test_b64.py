"""Strict base64: binascii's strict mode and the error messages agree on every input."""

from __future__ import annotations

import base64

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
