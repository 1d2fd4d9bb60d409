"""Params of the fs calls: each method's parsed into its request (`execproto.fs`), with the
reference's errors; and the limits the reference checks once they parsed.

The reference names each method's params struct in its messages (``invalid type: null,
expected struct WireFsReadFileParams``): `STRUCTS`. ``fs/walk``'s options and
``fs/watchMissing``'s params are also taken as serde's other form of a struct, its fields in
order as a sequence (`_structs`), with the reference's messages for one of the wrong length.
Loaded with the fs family, at the first fs call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _sandbox
from ._b64 import decode, decode_or_raise
from ._errors import invalid_params, invalid_request
from ._fields import Fields, text, wrong_type
from ._paths import path_from_uri
from ._sandbox import SandboxRequest
from ._structs import as_struct, short_struct
from .fs import (
    Canonicalize,
    Close,
    Copy,
    CreateDirectory,
    FsRequest,
    GetMetadata,
    Open,
    OpenMode,
    ReadBlock,
    ReadDirectory,
    ReadFile,
    Remove,
    Walk,
    Watch,
    WriteBlock,
    WriteFile,
)

MAX_BLOCK = 1 << 20
MAX_HANDLE_ID_BYTES = 32  # the reference's limit, counted in UTF-8 bytes
# The reference's ceilings for one walk; a request above them is refused, not clipped.
MAX_WALK_DEPTH = 64
MAX_WALK_DIRECTORIES = 10_000
MAX_WALK_ENTRIES = 50_000
# execproto's: one watch may name this many paths, so a client cannot make the server poll
# without bound (the reference, on inotify, has no such limit).
MAX_WATCHED_PATHS = 256
_I64_MAX = 2**63 - 1
_U64_MAX = 2**64 - 1

_WALK_FIELDS = (
    "maxDepth",
    "maxDirectories",
    "maxEntries",
    "followDirectorySymlinks",
    "pruneHiddenDirectories",
)


def count(expected: str) -> Callable[[Any], int]:
    """A non-negative integer field; ``expected`` names its Rust type in messages."""

    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong_type(value, expected)
        if isinstance(value, float) or not 0 <= value <= _U64_MAX:
            raise invalid_params("invalid number")
        return value

    return convert


def flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise wrong_type(value, "a boolean")
    return value


def _walk(f: Fields) -> Walk:
    path = path_from_uri(f.text("path"))
    value = f.required("options", lambda value: value)
    if value is None or not isinstance(value, (dict, list)):
        raise wrong_type(value, "struct WalkOptions")
    options = Fields(as_struct(value, _WALK_FIELDS), "WalkOptions")
    present = [name for name in _WALK_FIELDS[:4] if options.has(name)]
    found: dict[str, Any] = {}
    for name in present:
        convert = flag if name == "followDirectorySymlinks" else count("usize")
        found[name] = convert(options.raw(name))
    short_struct(value, "WalkOptions", _WALK_FIELDS, 4)
    for name in _WALK_FIELDS[:4]:
        if name not in found:
            raise invalid_params(f"missing field `{name}`")
    prune = options.raw("pruneHiddenDirectories")
    return Walk(path=path, max_depth=found["maxDepth"],
                max_directories=found["maxDirectories"], max_entries=found["maxEntries"],
                follow=found["followDirectorySymlinks"],
                prune_hidden=False if prune is None else flag(prune))


def walk_limits(request: Walk) -> None:
    """The reference checks the budgets once the params parsed, as a bad request."""
    if (
        request.max_depth > MAX_WALK_DEPTH
        or request.max_directories > MAX_WALK_DIRECTORIES
        or request.max_entries > MAX_WALK_ENTRIES
    ):
        raise invalid_request(
            f"filesystem walk limits exceed maximums: depth={MAX_WALK_DEPTH}, "
            f"directories={MAX_WALK_DIRECTORIES}, entries={MAX_WALK_ENTRIES}"
        )
    if request.max_directories == 0 or request.max_entries == 0:
        raise invalid_request("filesystem walk limits must be greater than zero")


def open_mode(value: Any) -> OpenMode:
    """``"read"``, ``"replace"``, or either as ``{"name": null}`` (a unit enum variant)."""
    if isinstance(value, dict):
        if len(value) != 1:
            raise invalid_params("invalid value: map, expected map with a single key")
        ((name, inner),) = value.items()
    elif isinstance(value, str):
        name, inner = value, None
    else:
        raise wrong_type(value, "string or map")
    if name == "read" or name == "replace":
        if inner is not None:
            raise wrong_type(inner, "unit")
        return "read" if name == "read" else "replace"
    raise invalid_params(f"unknown variant `{name}`, expected `read` or `replace`")


def _uri(f: Fields, name: str) -> str:
    return path_from_uri(f.text(name))


def _write_file(f: Fields) -> WriteFile:
    path = _uri(f, "path")
    data = decode_or_raise(
        f.text("dataBase64"),
        lambda why: invalid_request(f"fs/writeFile requires valid base64 dataBase64: {why}"),
    )
    return WriteFile(path=path, data=data)


def _remove(f: Fields) -> Remove:
    path = _uri(f, "path")
    recursive = f.flag("recursive", True)
    return Remove(path=path, recursive=recursive, force=f.flag("force", True))


def _copy(f: Fields) -> Copy:
    source = _uri(f, "sourcePath")
    destination = _uri(f, "destinationPath")
    return Copy(source=source, destination=destination, recursive=f.flag("recursive"))


def _open(f: Fields) -> Open:
    handle_id = f.ident("handleId")
    path = _uri(f, "path")
    # Absent means "read"; an explicit null is an error, as in the reference.
    mode = open_mode(f.raw("mode")) if f.has("mode") else "read"
    if len(handle_id.encode("utf-8", "surrogatepass")) > MAX_HANDLE_ID_BYTES:
        raise invalid_request(f"file handle ID must not exceed {MAX_HANDLE_ID_BYTES} bytes")
    return Open(handle_id=handle_id, path=path, mode=mode)


def _read_block(f: Fields) -> ReadBlock:
    handle_id = f.ident("handleId")
    offset = f.uint("offset")
    length = f.uint("len")
    if not 1 <= length <= MAX_BLOCK:
        raise invalid_request(f"file read block length must be between 1 and {MAX_BLOCK}")
    return ReadBlock(handle_id=handle_id, offset=offset, length=length)


def _write_block(f: Fields) -> WriteBlock:
    handle_id = f.ident("handleId")
    offset = f.required("offset", count("u64"))
    data = decode(f.text("chunk"))
    if not 1 <= len(data) <= MAX_BLOCK:
        raise invalid_request(f"file write block length must be between 1 and {MAX_BLOCK}")
    return WriteBlock(handle_id=handle_id, offset=offset, data=data)


def write_range(request: WriteBlock) -> None:
    if request.offset + len(request.data) > _I64_MAX:
        raise invalid_request("file write range exceeds the signed 64-bit file offset limit")


# Each fs method: the struct the reference names its params in messages (0.171.0, probed), and
# what reads them, field by field in the reference's order, since the first bad one is named.
PARSERS: dict[str, tuple[str, Callable[[Fields], FsRequest]]] = {
    "fs/readFile": ("WireFsReadFileParams", lambda f: ReadFile(path=_uri(f, "path"))),
    "fs/writeFile": ("WireFsWriteFileParams", _write_file),
    "fs/createDirectory": ("WireFsCreateDirectoryParams", lambda f: CreateDirectory(
        path=_uri(f, "path"), recursive=f.flag("recursive", True))),
    "fs/getMetadata": ("WireFsGetMetadataParams", lambda f: GetMetadata(path=_uri(f, "path"))),
    "fs/canonicalize": ("WireFsCanonicalizeParams",
                        lambda f: Canonicalize(path=_uri(f, "path"))),
    "fs/readDirectory": ("WireFsReadDirectoryParams",
                         lambda f: ReadDirectory(path=_uri(f, "path"))),
    "fs/walk": ("WireFsWalkParams", _walk),
    "fs/remove": ("WireFsRemoveParams", _remove),
    "fs/copy": ("WireFsCopyParams", _copy),
    "fs/open": ("WireFsOpenParams", _open),
    "fs/readBlock": ("FsReadBlockParams", _read_block),
    "fs/writeBlock": ("FsWriteBlockParams", _write_block),
    "fs/close": ("FsCloseParams", lambda f: Close(handle_id=f.ident("handleId"))),
}


def parse(method: str, raw: Any) -> tuple[FsRequest, SandboxRequest | None]:
    """Validate the params of the ``fs/*`` method ``method`` into the request the adapter runs,
    and the sandbox it asks for (resolved into a policy once the server's floor is known)."""
    struct, read = PARSERS[method]
    f = Fields(raw, struct)
    return read(f), _sandbox.parse(f.raw("sandbox"), for_fs=True)


_WATCH_FIELDS = ("watchId", "missing", "present")


def _paths(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise wrong_type(value, "a sequence")
    return tuple(path_from_uri(text(item)) for item in value)


def watch_missing(raw: Any) -> Watch:
    if not isinstance(raw, (dict, list)):
        raise wrong_type(raw, "struct FsWatchMissingParams")
    f = Fields(as_struct(raw, _WATCH_FIELDS), "FsWatchMissingParams")
    parsed: dict[str, Any] = {}
    if f.has("watchId"):
        parsed["watchId"] = count("u64")(f.raw("watchId"))
    if f.has("missing"):
        parsed["missing"] = _paths(f.raw("missing"))
    present = f.raw("present")
    present = None if present is None else path_from_uri(text(present))
    short_struct(raw, "FsWatchMissingParams", _WATCH_FIELDS, 3)
    for name in _WATCH_FIELDS[:2]:
        if name not in parsed:
            raise invalid_params(f"missing field `{name}`")
    return Watch(watch_id=parsed["watchId"], missing=parsed["missing"], present=present)


def watch_limit(request: Watch) -> None:
    if len(request.missing) > MAX_WATCHED_PATHS:
        raise invalid_request(f"fs/watchMissing watches at most {MAX_WATCHED_PATHS} paths")
