"""The file calls `RunFs` carries: one small class per method, validated by the core.

Each is an `FsRequest`, whose ``method`` names the wire method it came from and whose
``sandbox`` is the policy the call must stay within (the client's, narrowed by the operator's
floor), or None for none: reading where it denies is refused with EACCES, writing where it does
not grant write with EROFS, as a sandboxed process would see. Paths are native (the core has
turned the client's URIs into them). An adapter dispatches on the class.

Besides the ``fs/*`` calls, `ReadConfig`, `DiscoverSkills` and `DiscoverRoots` are file reads
about the executor's own setup (``environmentConfig/read`` and capability discovery), blocking
in the same way. `Watch` is ``fs/watchMissing``'s, which the core answers through
`WatchMissing` rather than `RunFs`.

Few clients use files at all: this module, and the fs family's events and actions, are loaded
at the first fs call or event (`ServerCore.LATER`), not at every start.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

from ._policy import Policy
from ._records import Record

__all__ = [
    "Canonicalize",
    "Close",
    "Copy",
    "CreateDirectory",
    "DiscoverRoots",
    "DiscoverSkills",
    "FsRequest",
    "GetMetadata",
    "Open",
    "OpenMode",
    "ReadBlock",
    "ReadConfig",
    "ReadDirectory",
    "ReadFile",
    "Remove",
    "SkillRoot",
    "Walk",
    "Watch",
    "WriteBlock",
    "WriteFile",
]

# fs/open's modes: "read", or "replace" (truncated, or created, at once; written by blocks).
OpenMode = Literal["read", "replace"]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class FsRequest(Record):
    """The base of every file call (see the module's docstring)."""

    method: ClassVar[str]
    sandbox: Policy | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ReadFile(FsRequest):
    method = "fs/readFile"
    path: str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class WriteFile(FsRequest):
    """Replace the file's content with ``data`` (created if missing)."""

    method = "fs/writeFile"
    path: str
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class CreateDirectory(FsRequest):
    """``recursive``: with its missing parents, and no error if it exists."""

    method = "fs/createDirectory"
    path: str
    recursive: bool


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class GetMetadata(FsRequest):
    method = "fs/getMetadata"
    path: str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Canonicalize(FsRequest):
    method = "fs/canonicalize"
    path: str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ReadDirectory(FsRequest):
    method = "fs/readDirectory"
    path: str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Walk(FsRequest):
    """A breadth-first listing under ``path``, within its budgets (checked against the
    reference's ceilings already). ``follow``: into symlinked directories;
    ``prune_hidden``: not into directories whose name starts with a dot."""

    method = "fs/walk"
    path: str
    max_depth: int
    max_directories: int
    max_entries: int
    follow: bool
    prune_hidden: bool = False


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Remove(FsRequest):
    """``recursive``: a directory with what it holds; ``force``: a missing path is no error."""

    method = "fs/remove"
    path: str
    recursive: bool
    force: bool


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Copy(FsRequest):
    """``recursive``: required to copy a directory (its tree)."""

    method = "fs/copy"
    source: str
    destination: str
    recursive: bool


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Open(FsRequest):
    """Open ``path`` under the client's ``handle_id``, scoped to the call's connection."""

    method = "fs/open"
    handle_id: str
    path: str
    mode: OpenMode = "read"


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ReadBlock(FsRequest):
    """Up to ``length`` bytes (1 to 1 MiB) at ``offset`` of an open file."""

    method = "fs/readBlock"
    handle_id: str
    offset: int
    length: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class WriteBlock(FsRequest):
    """``data`` (1 byte to 1 MiB) at ``offset`` of a file opened to replace."""

    method = "fs/writeBlock"
    handle_id: str
    offset: int
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Close(FsRequest):
    method = "fs/close"
    handle_id: str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Watch(FsRequest):
    """``fs/watchMissing``: the client's ``watch_id``, paths to see appear, and one to see go."""

    method = "fs/watchMissing"
    watch_id: int
    missing: tuple[str, ...]
    present: str | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ReadConfig(FsRequest):
    """``environmentConfig/read``: the TOML key paths asked of the config and requirements
    layers that apply at ``cwd``."""

    method = "environmentConfig/read"
    cwd: str
    config_paths: tuple[tuple[str, ...], ...]
    requirements_paths: tuple[tuple[str, ...], ...]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class DiscoverSkills(FsRequest):
    """``capabilities/discoverV2``: the skills found from ``cwd`` (read under ``sandbox``)."""

    method = "capabilities/discoverV2"
    cwd: str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class SkillRoot(Record):
    """A root ``capabilityRoots/discoverV1`` scans, under its own ``sandbox`` (None: the
    server's own scope)."""

    id: str
    path: str
    sandbox: Policy | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class DiscoverRoots(FsRequest):
    """``capabilityRoots/discoverV1``: the skills under each root, each in its own sandbox."""

    method = "capabilityRoots/discoverV1"
    roots: tuple[SkillRoot, ...]
