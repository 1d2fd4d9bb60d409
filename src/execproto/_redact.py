"""Redaction for traces: process output, stdin and environment values become filler.

A redacted trace still replays: the core never looks inside the bytes it forwards, so the same
events with filler in place of the payloads give the same actions with filler in them. Every
place a payload appears is rewritten the same way: ``OutputReceived.data`` and
``WriteStdin.data`` directly, and inside JSON frames every ``"chunk"`` string (output
notifications, read results, ``process/write`` params) that is valid base64.

Environment values are filler too, whatever their names (a name cannot tell a secret:
``GITHUB_PAT``, ``AWS_SESSION``, a Sentry DSN): the server's in the trace's header, the client's
in a ``process/start`` frame (``env`` and the env policy's ``set``), and every value of a
`Spawn`'s environment. Only ``PATH`` and ``TMPDIR`` stay: the core reads them (a prepended
PATH, the sandbox's tmpdir), so filler there would replay to other actions, and they name
places, not secrets. A spawn's environment is the one action whose values the core composes
(PATH, an inherited value, a set one); replay fills a redacted trace's spawns the same way
before it compares (`spawn_filler`).

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
# Header names that say a secret, beside SECRET_HEADERS: the env policy's default excludes,
# and passwords and credentials besides.
SECRET_NAMES = (*DEFAULT_EXCLUDES, "*PASS*", "*CREDENTIAL*")
# The variables whose values the core reads, kept as they are (see the module's docstring).
KEPT_VARIABLES = frozenset({"PATH", "TMPDIR"})


def _variable(name: str, value: str) -> str:
    return value if name in KEPT_VARIABLES else _hidden(value)


def spawn_filler(action: Any) -> Any:
    """A `Spawn` with its environment's values as filler (`KEPT_VARIABLES` aside)."""
    if not isinstance(action, Spawn):
        return action
    env = tuple((name, _variable(name, value)) for name, value in action.spec.env)
    return attrs.evolve(action, spec=attrs.evolve(action.spec, env=env))

_CHUNK = re.compile(rb'("chunk"\s*:\s*")([A-Za-z0-9+/=]*)(")')

# Headers whose values are credentials, beside names matching SECRET_NAMES (X-Api-Key...).
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
# A flat JSON object (strings may hold braces), and a "name" or "value" string field in it: a
# header is such an object, whatever other keys it has and in whatever order. Possessive, so a
# client's frame that almost matches costs one pass.
_OBJECT = re.compile(rb'\{(?:[^{}"]++|"(?:[^"\\]|\\.)*+")*+\}')
_FIELD = re.compile(rb'"(name|value)"\s*+:\s*+"((?:[^"\\]|\\.)*+)"')


def secret_header(name: str) -> bool:
    return name.lower() in SECRET_HEADERS or _matches(name, SECRET_NAMES)


def _header(match: re.Match[bytes]) -> bytes:
    """A secret header's value as filler of as many characters as it has once decoded, so the
    header a replayed core copies is the filler the recorded action has. (A variable of the
    server's that a header goes on with, ``valueEnvVar``, is in no frame or action: only its
    name is.)"""
    whole = match.group(0)
    fields = {field.group(1): field for field in _FIELD.finditer(whole)}
    if b"name" not in fields or b"value" not in fields:
        return whole
    try:
        shown = json.loads(b'"' + fields[b"name"].group(2) + b'"')
        value = json.loads(b'"' + fields[b"value"].group(2) + b'"')
    except ValueError:
        return whole  # not JSON: the core refuses it, and says why
    if not isinstance(shown, str) or not secret_header(shown):
        return whole
    start, end = fields[b"value"].span(2)
    return whole[:start] + json.dumps(_hidden(value))[1:-1].encode() + whole[end:]


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
        data = _OBJECT.sub(_header, data)
    if b'"env' in data or b'"set"' in data:
        data = _ENV.sub(_env, data)
    return data


# A process/start's `env`, or its env policy's `set`: an object of strings only.
_PAIR = rb'"(?:[^"\\]|\\.)*"\s*:\s*"(?:[^"\\]|\\.)*"'
# Possessive: a client's frame that almost matches must not make it try every split.
_ENV = re.compile(rb'("(?:env|set)"\s*+:\s*+\{)((?:\s*+' + _PAIR + rb'\s*+,?+)*+\s*+)(\})')
_ONE_PAIR = re.compile(rb'"((?:[^"\\]|\\.)*)"(\s*:\s*)"((?:[^"\\]|\\.)*)"')


def _env(match: re.Match[bytes]) -> bytes:
    return match.group(1) + _ONE_PAIR.sub(_env_pair, match.group(2)) + match.group(3)


def _env_pair(match: re.Match[bytes]) -> bytes:
    """One variable with its value as filler of as many characters as it has once decoded, so
    what a replayed core copies is the filler the recorded spawn has."""
    name, colon, value = match.group(1, 2, 3)
    try:
        shown = json.loads(b'"' + name + b'"')
        length = len(json.loads(b'"' + value + b'"'))
    except ValueError:
        return match.group(0)  # not JSON: the core refuses it, and says why
    if shown in KEPT_VARIABLES:
        return match.group(0)
    return b'"' + name + b'"' + colon + b'"' + FILLER * length + b'"'


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
    """`redact` for one server: also the environment, in the header and in every spawn."""

    def __init__(self, host: Host) -> None:
        # What the header records: the same names in the same order, the values as filler.
        self.host = attrs.evolve(host, env={name: _variable(name, value)
                                            for name, value in host.env.items()})

    def __call__(self, value: Any) -> Any:
        return spawn_filler(value) if isinstance(value, Spawn) else redact(value)


# Control characters stay where they are in a hidden value: whether a header value is valid
# depends on them (the core refuses one with a line break), and a replay must decide as the
# recording did. That they were there says next to nothing about a secret.
_SHOWN = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]")


def _hidden(text: str) -> str:
    return _SHOWN.sub(FILLER.decode(), text)
