"""The actions of the fs family: the file calls the core asks the adapter to run, and the
watches it asks it to keep.

Made at their first use, as the fs events are (see `_fs_events`): `execproto.actions` finds
each here when it is first asked for.
"""

from __future__ import annotations

import attrs

from ._policy import Policy
from .actions import Action
from .fs import FsRequest

__all__ = ["RunFs", "Unwatch", "WatchMissing"]


@attrs.frozen(kw_only=True, repr=False, eq=False)
class RunFs(Action):
    """Run a blocking file call off the event loop; answer with `FsCompleted`. ``request`` is
    one of `execproto.fs`'s classes: an ``fs/*`` call, or a read about the executor's own
    setup (``environmentConfig/read``, capability discovery).

    ``conn`` scopes ``fs/open`` handles; the adapter closes a connection's handles when it closes.
    """

    op: int
    conn: int
    request: FsRequest


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class WatchMissing(Action):
    """Watch for any of ``missing`` to appear (or ``present`` to go); answer with `FsCompleted`
    for ``op``: ``{"watching": true}`` when every missing path is absent and ``present`` (if
    any) exists, else ``{"watching": false}`` and nothing more. A watch that holds reports
    `MissingChanged` once, for ``watch``, and is then over. Paths are native.

    ``sandbox``: the operator's floor (the call carries no sandbox of its own). A path outside
    what it and ``--fs-root`` allow is refused; one that leads outside through a symlink counts
    as missing, so a watch tells nothing about what exists out there."""

    op: int
    watch: int
    missing: tuple[str, ...]
    present: str | None
    sandbox: Policy | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Unwatch(Action):
    """Stop the watch (replaced, or its connection closed). Harmless if it already fired."""

    watch: int
