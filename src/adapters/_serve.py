"""What every adapter's ``serve`` does the same way: build the core, shut it down."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from execproto import Config, ServerCore
from execproto._trace import Recorder

from ._host import this_host
from .backends import Backend

PING_INTERVAL = 30.0


def make_core(
    config: Config | None,
    trace: Callable[[str], None] | None,
    backend: Backend | None = None,
    redact_trace: bool = False,
) -> ServerCore | Recorder:
    """A core for this host, recording to ``trace`` (one JSON line per call) when given, with
    process output and stdin replaced by filler when ``redact_trace``."""
    sandbox = backend.sandbox_type if backend is not None else "none"
    core = ServerCore(attrs.evolve(config or Config(), sandbox_type=sandbox), this_host())
    return core if trace is None else Recorder(core, trace, redact=redact_trace)
