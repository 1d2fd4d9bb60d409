"""What every adapter's ``serve`` does the same way: build the core, shut it down."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from execproto import Config, ServerCore
from execproto._trace import Recorder

from ._host import this_host
from .backends import Backend, LocalBackend, check_sandbox_type

PING_INTERVAL = 30.0


def make_core(
    config: Config | None,
    trace: Callable[[str], None] | None,
    backend: Backend | None = None,
    redact_trace: bool = False,
) -> tuple[ServerCore | Recorder, Backend]:
    """A core for this host and the backend it spawns through (by default this machine, with
    bubblewrap for sandboxed requests where it can run), recording to ``trace`` (one JSON line
    per call) when given, with process output and stdin replaced by filler when
    ``redact_trace``. A backend whose `sandbox_type` no client can read raises ValueError."""
    config = config or Config()
    backend = backend or LocalBackend(floor=config.floor)
    sandbox = check_sandbox_type(backend)
    core = ServerCore(attrs.evolve(config, sandbox_type=sandbox), this_host())
    return (core if trace is None else Recorder(core, trace, redact=redact_trace)), backend
