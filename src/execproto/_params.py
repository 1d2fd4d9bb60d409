"""Typed, validated params for each method. A bad field raises `RpcError` (-32602).

Messages name the field the way the client spelled it (camelCase), so a client author can find
the mistake without reading this code.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import attrs

from ._env import INHERIT_CHOICES, EnvPolicy
from ._errors import RpcError, invalid_params
from ._paths import path_from_uri

# Rust clients send u64 fields; larger values cannot be meant and would only feed arithmetic.
_MAX_UINT = 2**64 - 1


class Fields:
    """Reads a params object field by field, with one message style for every mistake."""

    __slots__ = ("_params",)

    def __init__(self, params: Any) -> None:
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise invalid_params("invalid params: expected an object")
        self._params: dict[str, Any] = params

    def _get(self, name: str, required: bool) -> Any:
        value = self._params.get(name)
        if value is None and required:
            raise invalid_params(f"invalid params: missing field `{name}`")
        return value

    def raw(self, name: str) -> Any:
        return self._params.get(name)

    @staticmethod
    def _wrong(name: str, expected: str) -> RpcError:
        return invalid_params(f"invalid params: `{name}` must be {expected}")

    def text(self, name: str) -> str:
        value = self._get(name, True)
        if not isinstance(value, str):
            raise self._wrong(name, "a string")
        return value

    def opt_text(self, name: str) -> str | None:
        value = self._get(name, False)
        if value is not None and not isinstance(value, str):
            raise self._wrong(name, "a string")
        return value

    def flag(self, name: str, default: bool | None = None) -> bool:
        value = self._get(name, default is None)
        if value is None:
            assert default is not None
            return default
        if not isinstance(value, bool):
            raise self._wrong(name, "a boolean")
        return value

    def opt_uint(self, name: str) -> int | None:
        value = self._get(name, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_UINT:
            raise self._wrong(name, "a non-negative integer")
        return value

    def uint(self, name: str) -> int:
        self._get(name, True)
        value = self.opt_uint(name)
        assert value is not None
        return value

    def texts(self, name: str, required: bool = True) -> tuple[str, ...]:
        value = self._get(name, required)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._wrong(name, "an array of strings")
        return tuple(value)

    def text_map(self, name: str, required: bool = True) -> dict[str, str]:
        value = self._get(name, required)
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._wrong(name, "an object of strings")
        return value

    def base64(self, name: str, required: bool = True) -> bytes | None:
        value = self._get(name, required)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._wrong(name, "a base64 string")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise self._wrong(name, "valid base64") from None

    def uri(self, name: str) -> str:
        return path_from_uri(self.text(name), name)

    def sub(self, name: str) -> Fields | None:
        value = self._get(name, False)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._wrong(name, "an object")
        return Fields(value)


def nonempty_id(fields: Fields, name: str) -> str:
    value = fields.text(name)
    if not value:
        raise invalid_params(f"invalid params: `{name}` must not be empty")
    return value


@attrs.frozen(kw_only=True)
class InitializeParams:
    client_name: str
    resume_session_id: str | None


def initialize(params: Any) -> InitializeParams:
    fields = Fields(params)
    return InitializeParams(
        client_name=fields.text("clientName"),
        resume_session_id=fields.opt_text("resumeSessionId"),
    )


@attrs.frozen(kw_only=True)
class StartParams:
    process_id: str
    argv: tuple[str, ...]
    arg0: str | None
    cwd: str
    env: dict[str, str]
    tty: bool
    pipe_stdin: bool
    env_policy: EnvPolicy | None


def _env_policy(fields: Fields | None) -> EnvPolicy | None:
    if fields is None:
        return None
    inherit = fields.opt_text("inherit") or "all"
    if inherit not in INHERIT_CHOICES:
        raise invalid_params(
            f"invalid params: `envPolicy.inherit` must be one of all, core, none; got {inherit!r}"
        )
    return EnvPolicy(
        inherit=inherit,
        ignore_default_excludes=fields.flag("ignoreDefaultExcludes", False),
        exclude=fields.texts("exclude", required=False),
        set=tuple(fields.text_map("set", required=False).items()),
        include_only=fields.texts("includeOnly", required=False),
    )


def start(params: Any) -> StartParams:
    fields = Fields(params)
    process_id = nonempty_id(fields, "processId")
    argv = fields.texts("argv")
    if not argv:
        raise invalid_params("invalid params: `argv` must not be empty")
    return StartParams(
        process_id=process_id,
        argv=argv,
        arg0=fields.opt_text("arg0"),
        cwd=fields.uri("cwd"),
        env=fields.text_map("env"),
        tty=fields.flag("tty", False),
        pipe_stdin=fields.flag("pipeStdin", False),
        env_policy=_env_policy(fields.sub("envPolicy")),
    )


@attrs.frozen(kw_only=True)
class ReadParams:
    process_id: str
    after_seq: int
    max_bytes: int | None
    wait_ms: int


def read(params: Any) -> ReadParams:
    fields = Fields(params)
    return ReadParams(
        process_id=fields.text("processId"),
        after_seq=fields.opt_uint("afterSeq") or 0,
        max_bytes=fields.opt_uint("maxBytes"),
        wait_ms=fields.opt_uint("waitMs") or 0,
    )


@attrs.frozen(kw_only=True)
class WriteParams:
    process_id: str
    chunk: bytes
    write_id: str
    # execproto's extension: close stdin after this write, so a program reading to EOF can end.
    close_stdin: bool


def write(params: Any) -> WriteParams:
    fields = Fields(params)
    chunk = fields.base64("chunk")
    assert chunk is not None
    return WriteParams(
        process_id=fields.text("processId"),
        chunk=chunk,
        write_id=nonempty_id(fields, "writeId"),
        close_stdin=fields.flag("closeStdin", False),
    )


# Wire name → the signal the process group gets.
SIGNALS = {"interrupt": "INT"}


@attrs.frozen(kw_only=True)
class SignalParams:
    process_id: str
    signal: str


def signal(params: Any) -> SignalParams:
    fields = Fields(params)
    name = fields.text("signal")
    if name not in SIGNALS:
        raise invalid_params(
            f"invalid params: `signal` must be one of {', '.join(SIGNALS)}; got {name!r}"
        )
    return SignalParams(process_id=fields.text("processId"), signal=SIGNALS[name])


def process_id(params: Any) -> str:
    return Fields(params).text("processId")
