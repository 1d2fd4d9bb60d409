"""Reading JSON params field by field, with the reference's deserializer messages.

``missing field `x` `` for an absent required field, ``invalid type: <what came>, expected <what
was wanted>`` for a wrong one (an explicit null included), ``invalid number`` for a negative or
fractional count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._errors import RpcError, invalid_params
from ._jsonrpc import describe

T = TypeVar("T")

# Counts are u64 on the reference's side; anything outside is "invalid number" there too.
_MAX_UINT = 2**64 - 1

MAX_ID = 256  # characters of an id the server keeps (see `Fields.ident`); Codex's are ~40


def wrong_type(value: Any, expected: str) -> RpcError:
    return invalid_params(f"invalid type: {describe(value)}, expected {expected}")


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise wrong_type(value, "a string")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise wrong_type(value, "a boolean")
    return value


def _uint(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong_type(value, "u64")
    if isinstance(value, float) or not 0 <= value <= _MAX_UINT:
        raise invalid_params("invalid number")
    return value


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise wrong_type(value, "a sequence")
    return tuple(text(item) for item in value)


def _text_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise wrong_type(value, "a map")
    return {key: text(item) for key, item in value.items()}


class Fields:
    """Reads a params object field by field. ``struct`` names it in messages."""

    __slots__ = ("_params",)

    def __init__(self, params: Any, struct: str) -> None:
        if not isinstance(params, dict):
            raise wrong_type(params, f"struct {struct}")
        self._params: dict[str, Any] = params

    def has(self, name: str) -> bool:
        return name in self._params

    def raw(self, name: str) -> Any:
        """The field as sent (None when absent)."""
        return self._params.get(name)

    def required(self, name: str, convert: Callable[[Any], T]) -> T:
        if name not in self._params:
            raise invalid_params(f"missing field `{name}`")
        return convert(self._params[name])

    def optional(self, name: str, convert: Callable[[Any], T]) -> T | None:
        value = self._params.get(name)
        return None if value is None else convert(value)

    def text(self, name: str) -> str:
        return self.required(name, text)

    def ident(self, name: str) -> str:
        """A name the server keeps for as long as what it names (a processId, 4096 writeIds of
        each process, a handleId): bounded, so ids cannot be how a client fills the memory."""
        value = self.text(name)
        if len(value) > MAX_ID:
            raise invalid_params(f"{name} is longer than {MAX_ID} characters")
        return value

    def opt_text(self, name: str) -> str | None:
        return self.optional(name, text)

    def flag(self, name: str, default: bool | None = None) -> bool:
        if default is None:
            return self.required(name, _flag)
        value = self.optional(name, _flag)
        return default if value is None else value

    def uint(self, name: str) -> int:
        return self.required(name, _uint)

    def opt_uint(self, name: str) -> int | None:
        return self.optional(name, _uint)

    def texts(self, name: str) -> tuple[str, ...]:
        return self.required(name, _texts)

    def text_map(self, name: str) -> dict[str, str]:
        return self.required(name, _text_map)
