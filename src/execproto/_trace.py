"""Record every `handle()` call as JSON Lines, and replay a recording into a fresh core.

Line 1 is a header: format, version, the `Config` and the `Host` facts. Every further line is one
call: ``{"t": now, "event": ..., "actions": [...]}``, or ``"error"`` in place of ``"actions"`` when
the call raised (`LocalProtocolError`, or a bug of the core's, which stops it; see
`ServerCore.handle`). Events and actions are written as their attrs fields with
``"$type"`` naming the class; bytes are ``{"$bytes": base64}``. Because the core is deterministic,
replaying the events at the recorded times must give the recorded actions, step for step.

A recorder made with ``redact=True`` writes process output, stdin and environment values as
filler of the same length (see `_redact`); the header says so, and the trace still replays:
the replayed spawns are filled the same way before they are compared.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from . import (
    _forward_actions,
    _forward_events,
    _fs_actions,
    _fs_events,
    _http_actions,
    _http_events,
    _netproxy,
    _policy,
    _snapshot,
    actions,
    events,
    fs,
)
from ._config import Config, Host
from ._errors import LocalProtocolError, RpcError
from ._redact import Redactor, spawn_filler
from ._server import ServerCore
from ._session import Greeting
from .actions import Action
from .events import EVENT_TYPES, Event

FORMAT = "execproto-trace"
# 2: the file calls' requests are execproto.fs's classes, and an exit is applied before the
# deadlines due at its event: a v1 trace's steps would not replay as recorded.
VERSION = 2

_TYPES: dict[str, type] = {
    cls.__name__: cls
    for module in (events, actions, _fs_events, _fs_actions, fs, _forward_events,
                   _forward_actions, _http_events, _http_actions, _policy, _netproxy, _snapshot)
    for cls in vars(module).values()
    if isinstance(cls, type) and attrs.has(cls)
}
_TYPES["RpcError"] = RpcError


def to_json(value: Any) -> Any:
    """A JSON-able form of an event, an action or any value inside one."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if attrs.has(type(value)):
        out = {"$type": type(value).__name__}
        for field in attrs.fields(type(value)):
            out[field.name] = to_json(getattr(value, field.name))
        return out
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


def from_json(value: Any) -> Any:
    """The inverse of `to_json` (sequences come back as tuples)."""
    if isinstance(value, list):
        return tuple(from_json(item) for item in value)
    if not isinstance(value, dict):
        return value
    if "$bytes" in value:
        return base64.b64decode(value["$bytes"])
    fields = {key: from_json(item) for key, item in value.items() if key != "$type"}
    if "$type" not in value:
        return fields
    cls = _TYPES[value["$type"]]
    if cls is RpcError:
        return RpcError(fields["code"], fields["message"], fields.get("data"))
    return cls(**fields)


# What a redacted trace's header lists when every environment value is filler.
ENVIRONMENT = "environment values"


def _header(config: Config, host: Host, redacted: bool) -> dict[str, Any]:
    header = {
        "format": FORMAT,
        "version": VERSION,
        # Field by field, so a nested value (the sandbox floor) keeps its type for replay.
        "config": {f.name: to_json(getattr(config, f.name)) for f in attrs.fields(Config)
                   if f.metadata.get("traced", True)},  # not the encoder: a function
        "host": attrs.asdict(host),
    }
    if redacted:
        header["redacted"] = ["process output", "stdin", ENVIRONMENT, "secret headers"]
    return header


def _dumps(value: Any) -> str:
    # Key order is kept, not sorted: dict order is data here (a Host.env feeds the order of a
    # spawned environment, an fs result the order of its answer's fields).
    return json.dumps(value, separators=(",", ":"))


class Recorder:
    """A `ServerCore` that also writes each call to ``sink`` (one JSON line per call).

    A trace is a record, not the service: if the sink raises (a full disk), recording stops
    there, `sink_failure` says why, and the core goes on untraced. The header is written at
    once, so a sink that cannot take even that fails here, at start-up."""

    def __init__(
        self, core: ServerCore, sink: Callable[[str], None], *, redact: bool = False
    ) -> None:
        self.core = core
        self._sink: Callable[[str], None] | None = sink
        self.sink_failure: Exception | None = None
        redactor = Redactor(core.host) if redact else None
        self._shown: Callable[[Any], Any] = redactor or _same
        sink(_dumps(_header(core.config, redactor.host if redactor else core.host, redact)))

    def handle(self, event: Event, now: float) -> list[Action]:
        if type(event) not in EVENT_TYPES:
            # Refused before recording: a trace holds only what a fresh core can be fed again.
            raise LocalProtocolError(f"not an event: {type(event).__name__}")
        if self._sink is None:
            return self.core.handle(event, now)
        step: dict[str, Any] = {"t": now, "event": to_json(self._shown(event))}
        try:
            actions = self.core.handle(event, now)
        except Exception as exc:  # the step that stopped the core is the one worth keeping
            step["error"] = error_text(exc)
            self._write(step)
            raise
        step["actions"] = [to_json(self._shown(action)) for action in actions]
        self._write(step)
        return actions

    def _write(self, step: dict[str, Any]) -> None:
        assert self._sink is not None
        try:
            self._sink(_dumps(step))
        except Exception as exc:  # the trace ends; the server does not
            self._sink = None
            self.sink_failure = exc

    def next_deadline(self) -> float | None:
        return self.core.next_deadline()

    @property
    def error(self) -> BaseException | None:
        return self.core.error

    @property
    def idle(self) -> bool:
        return self.core.idle

    def greeting(self, conn: int) -> Greeting | None:
        return self.core.greeting(conn)


def _same(value: Any) -> Any:
    return value


def error_text(exc: Exception) -> str:
    """A step's ``"error"``: the message of a `LocalProtocolError`, else the type too."""
    return str(exc) if isinstance(exc, LocalProtocolError) else f"{type(exc).__name__}: {exc}"


@attrs.frozen(kw_only=True)
class ReplayResult:
    """``ok`` when every step matched; otherwise the first step (1-based) that did not, with its
    ``event`` and the ``expected`` (recorded) and ``actual`` (replayed) actions, as JSON.

    ``cut_short``: the trace's last line was not whole (the recorder stopped mid-line: a crash,
    a full disk); the ``steps`` before it were replayed."""

    ok: bool
    steps: int
    step: int | None = None
    expected: Any = None
    actual: Any = None
    event: Any = None
    cut_short: bool = False

    def diff(self) -> list[str]:
        """The divergence as a unified diff of the recorded and the replayed actions, one
        action a line, bytes shown as bytes (a JSON-RPC message reads as its text)."""
        import difflib  # only when there is a divergence to show

        return list(difflib.unified_diff(
            _action_lines(self.expected), _action_lines(self.actual),
            "recorded", "replayed", lineterm="", n=3))


def load_header(line: str) -> tuple[Config, Host]:
    header = json.loads(line)
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ValueError(f"not an {FORMAT} v{VERSION} trace: {line[:80]!r}")
    fields = {key: from_json(value) for key, value in header["config"].items()}
    return Config(**fields), Host(**header["host"])


def readable(value: Any) -> str:
    """A JSON form of `to_json` in the shape of Python's reprs: ``Send(conn=1, data=b'...')``."""
    if isinstance(value, dict):
        if "$bytes" in value and len(value) == 1:
            return repr(base64.b64decode(value["$bytes"]))
        fields = ", ".join(f"{key}={readable(item)}" for key, item in value.items()
                           if key != "$type")
        if "$type" in value:
            return f"{value['$type']}({fields})"
        return "{" + ", ".join(f"{json.dumps(key)}: {readable(item)}"
                               for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(readable(item) for item in value) + "]"
    return json.dumps(value)


def _action_lines(actions: Any) -> list[str]:
    if isinstance(actions, dict) and set(actions) == {"error"}:  # the step raised
        return [f"raised {actions['error']}"]
    if isinstance(actions, list):
        return [readable(action) for action in actions] or ["(no actions)"]
    return [readable(actions)]


def replay(lines: Iterable[str]) -> ReplayResult:
    """Feed a recorded trace to a fresh core and compare its actions step by step.

    A last line that is not JSON and has no newline is a step the recorder was cut off while
    writing: what came before is replayed, and the result says ``cut_short``. A bad line
    anywhere else raises (`ValueError`), as a header that is not a trace's does."""
    it = iter(line for line in lines if line.strip())
    first = next(it)
    config, host = load_header(first)
    core = ServerCore(config, host)
    filled = spawn_filler if ENVIRONMENT in json.loads(first).get("redacted", ()) else _same
    steps = 0
    for number, line in enumerate(it, start=1):
        try:
            step = json.loads(line)
        except ValueError:
            if line.endswith("\n") or next(it, None) is not None:
                raise
            return ReplayResult(ok=True, steps=steps, cut_short=True)
        steps = number
        event = from_json(step["event"])
        try:
            actual: Any = json.loads(_dumps([to_json(filled(a))
                                              for a in core.handle(event, step["t"])]))
        except Exception as exc:  # noqa: BLE001 - a bug replays as a step that differs
            actual = {"error": error_text(exc)}
        expected = step["actions"] if "actions" in step else {"error": step["error"]}
        if actual != expected:
            return ReplayResult(ok=False, steps=steps, step=steps, expected=expected,
                                actual=actual, event=step["event"])
    return ReplayResult(ok=True, steps=steps)
