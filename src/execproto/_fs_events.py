"""The events of the fs family: what the adapter reports of the calls and watches it was asked
for (`RunFs`, `WatchMissing`).

Made at the first use of one of them, not at every start, as the fs family is (see `fs`):
`execproto.events` finds each here when it is first asked for (PEP 562), and the core loads its
fs calls (`_fs_service`) at the first fs call or fs event.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._errors import RpcError
from .events import Event

__all__ = ["FsCompleted", "MissingChanged"]


@attrs.frozen(kw_only=True, repr=False, eq=False)
class FsCompleted(Event):
    """A `RunFs` call (or a `WatchMissing` watch's first check) is done: its ``result``, the
    method's JSON result (or an `execproto.events.Encoded` one), or its ``error``, answered
    to the client as it is."""

    op: int
    result: Any = None
    error: RpcError | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class MissingChanged(Event):
    """A `WatchMissing` watch saw a missing path appear (or its present path go)."""

    watch: int
