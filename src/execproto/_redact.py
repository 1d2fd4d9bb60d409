"""Redaction for traces: process output and stdin become filler of the same length.

A redacted trace still replays: the core never looks inside the bytes it forwards, so the same
events with filler in place of the payloads give the same actions with filler in them. Every
place a payload appears is rewritten the same way: ``OutputReceived.data`` and
``WriteStdin.data`` directly, and inside JSON frames every ``"chunk"`` string (output
notifications, read results, ``process/write`` params) that is valid base64.

The trace's header carries the server's environment, which a process with an env policy may
inherit: the values of names like ``*KEY*``, ``*SECRET*`` and ``*TOKEN*`` (the default
excludes), ``*PASS*`` (``*PASSWORD*`` with it) and ``*CREDENTIAL*``, and any value holding a
URL's credentials (``postgres://user:pw@host``), are filler too, and so are those values
wherever a `Spawn` inherited them. Replay feeds the filler environment to the fresh core,
which then spawns with the same filler: the core copies values and never looks inside them.

The values of ``http/request`` headers that carry credentials (`secret_header`: Authorization,
Cookie and the like, and names matching the secret patterns) are filler too, in the request,
in the `RunHttp` it becomes, and in the response's headers (Set-Cookie). URLs, bodies and every
other header stay as they are.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

import attrs

from ._config import Host
from ._env import DEFAULT_EXCLUDES, _matches
from .actions import RunHttp, Send, Spawn, WriteStdin
from .events import HttpResponded, MessageReceived, OutputReceived

FILLER = b"x"
# The server's variables a shared trace must not show: the env policy's default excludes, and
# passwords and credentials besides; and any value with credentials in a URL.
SECRET_NAMES = (*DEFAULT_EXCLUDES, "*PASS*", "*CREDENTIAL*")
_URL_CREDENTIALS = re.compile(r"://[^/\s:@]*:[^/\s@]*@")


def secret(name: str, value: str) -> bool:
    return _matches(name, SECRET_NAMES) or _URL_CREDENTIALS.search(value) is not None

_CHUNK = re.compile(rb'("chunk"\s*:\s*")([A-Za-z0-9+/=]*)(")')

# Headers whose values are credentials, beside names matching SECRET_NAMES (X-Api-Key...).
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
# A header as JSON writes it, {"name": ..., "value": ...}, in either order.
_STRING = rb'"((?:[^"\\]|\\.)*)"'
_HEADER = re.compile(rb'"name"\s*:\s*' + _STRING + rb'\s*,\s*"value"\s*:\s*' + _STRING
                     + rb'|"value"\s*:\s*' + _STRING + rb'\s*,\s*"name"\s*:\s*' + _STRING)


def secret_header(name: str) -> bool:
    return name.lower() in SECRET_HEADERS or _matches(name, SECRET_NAMES)


def _header(match: re.Match[bytes]) -> bytes:
    """A secret header's value as filler of as many characters as it has once decoded, so the
    header a replayed core copies is the filler the recorded action has."""
    name, value, first = match.group(1, 2, 0)
    start, end = match.span(2)
    if name is None:
        value, name = match.group(3, 4)
        start, end = match.span(3)
    try:
        shown = json.loads(b'"' + name + b'"')
        length = len(json.loads(b'"' + value + b'"'))
    except ValueError:
        return first  # not JSON: the core refuses it, and says why
    if not secret_header(shown):
        return first
    offset = match.start(0)
    return first[:start - offset] + FILLER * length + first[end - offset:]


def _headers(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((name, _hidden(value) if secret_header(name) else value)
                 for name, value in headers)


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
        return redact_bytes(encoded).decode("utf-8", "surrogatepass")
    return redact_bytes(data)


def redact_bytes(data: bytes) -> bytes:
    data = _CHUNK.sub(_chunk, data)
    if b'"name"' in data:
        data = _HEADER.sub(_header, data)
    return data


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
    if isinstance(value, RunHttp):
        return attrs.evolve(value, request=attrs.evolve(
            value.request, headers=_headers(value.request.headers)))
    if isinstance(value, HttpResponded):
        return attrs.evolve(value, headers=_headers(value.headers))
    return value


class Redactor:
    """`redact` for one server: also the secrets of its environment, in the header and in the
    environments of the processes that inherited them."""

    def __init__(self, host: Host) -> None:
        self._secrets = {name: value for name, value in host.env.items()
                         if secret(name, value)}
        hidden = {name: _hidden(value) for name, value in self._secrets.items()}
        # What the header records: the same names in the same order, the secrets as filler.
        self.host = attrs.evolve(host, env={name: hidden.get(name, value)
                                            for name, value in host.env.items()})

    def __call__(self, value: Any) -> Any:
        if isinstance(value, Spawn) and self._secrets:
            # Only a value the server's environment gave: a client's own --env came in a frame,
            # which the trace keeps as it is, and replay must find the same value again.
            env = tuple((name, _hidden(text) if self._secrets.get(name) == text else text)
                        for name, text in value.spec.env)
            return attrs.evolve(value, spec=attrs.evolve(value.spec, env=env))
        return redact(value)


def _hidden(text: str) -> str:
    return FILLER.decode() * len(text)
