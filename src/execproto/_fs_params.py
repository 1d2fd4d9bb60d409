"""Params of the fs calls added in 0.171: ``fs/walk``, ``fs/open``'s mode, ``fs/writeBlock``,
``fs/watchMissing``; and the limits the reference checks once they parsed.

The reference deserializes a struct from a map or, serde's other form, from its fields in order
as a sequence; both are accepted here too, with its messages for a sequence of the wrong length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._b64 import decode
from ._errors import invalid_params, invalid_request
from ._fields import Fields, text, wrong_type
from ._paths import path_from_uri
from ._structs import as_struct, short_struct

MAX_BLOCK = 1 << 20
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
OPEN_MODES = ("read", "replace")


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


def _walk_options(value: Any) -> dict[str, Any]:
    if value is None or not isinstance(value, (dict, list)):
        raise wrong_type(value, "struct WalkOptions")
    mapped = as_struct(value, _WALK_FIELDS)
    f = Fields(mapped, "WalkOptions")
    present = [name for name in _WALK_FIELDS[:4] if f.has(name)]
    options = {}
    for name in present:
        convert = flag if name == "followDirectorySymlinks" else count("usize")
        options[name] = convert(f.raw(name))
    short_struct(value, "WalkOptions", _WALK_FIELDS, 4)
    for name in _WALK_FIELDS[:4]:
        if name not in options:
            raise invalid_params(f"missing field `{name}`")
    prune = f.raw("pruneHiddenDirectories")
    options["pruneHiddenDirectories"] = False if prune is None else flag(prune)
    return {
        "maxDepth": options["maxDepth"],
        "maxDirectories": options["maxDirectories"],
        "maxEntries": options["maxEntries"],
        "follow": options["followDirectorySymlinks"],
        "pruneHidden": options["pruneHiddenDirectories"],
    }


def walk(f: Fields) -> dict[str, Any]:
    path = path_from_uri(f.text("path"))
    return {"path": path, **f.required("options", _walk_options)}


def walk_limits(params: dict[str, Any]) -> None:
    """The reference checks the budgets once the params parsed, as a bad request."""
    if (
        params["maxDepth"] > MAX_WALK_DEPTH
        or params["maxDirectories"] > MAX_WALK_DIRECTORIES
        or params["maxEntries"] > MAX_WALK_ENTRIES
    ):
        raise invalid_request(
            f"filesystem walk limits exceed maximums: depth={MAX_WALK_DEPTH}, "
            f"directories={MAX_WALK_DIRECTORIES}, entries={MAX_WALK_ENTRIES}"
        )
    if params["maxDirectories"] == 0 or params["maxEntries"] == 0:
        raise invalid_request("filesystem walk limits must be greater than zero")


def open_mode(value: Any) -> str:
    """``"read"``, ``"replace"``, or either as ``{"name": null}`` (a unit enum variant)."""
    if isinstance(value, dict):
        if len(value) != 1:
            raise invalid_params("invalid value: map, expected map with a single key")
        ((name, inner),) = value.items()
    elif isinstance(value, str):
        name, inner = value, None
    else:
        raise wrong_type(value, "string or map")
    if not isinstance(name, str) or name not in OPEN_MODES:
        raise invalid_params(f"unknown variant `{name}`, expected `read` or `replace`")
    if inner is not None:
        raise wrong_type(inner, "unit")
    return name


def write_block(f: Fields) -> dict[str, Any]:
    params: dict[str, Any] = {
        "handleId": f.ident("handleId"),
        "offset": f.required("offset", count("u64")),
        "data": decode(f.text("chunk")),
    }
    if not 1 <= len(params["data"]) <= MAX_BLOCK:
        raise invalid_request(f"file write block length must be between 1 and {MAX_BLOCK}")
    return params


def write_range(params: dict[str, Any]) -> None:
    if params["offset"] + len(params["data"]) > _I64_MAX:
        raise invalid_request("file write range exceeds the signed 64-bit file offset limit")


_WATCH_FIELDS = ("watchId", "missing", "present")


def _paths(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise wrong_type(value, "a sequence")
    return tuple(path_from_uri(text(item)) for item in value)


def watch_missing(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, (dict, list)):
        raise wrong_type(raw, "struct FsWatchMissingParams")
    f = Fields(as_struct(raw, _WATCH_FIELDS), "FsWatchMissingParams")
    parsed: dict[str, Any] = {}
    if f.has("watchId"):
        parsed["watchId"] = count("u64")(f.raw("watchId"))
    if f.has("missing"):
        parsed["missing"] = _paths(f.raw("missing"))
    present = f.raw("present")
    parsed["present"] = None if present is None else path_from_uri(text(present))
    short_struct(raw, "FsWatchMissingParams", _WATCH_FIELDS, 3)
    for name in _WATCH_FIELDS[:2]:
        if name not in parsed:
            raise invalid_params(f"missing field `{name}`")
    return parsed


def watch_limit(params: dict[str, Any]) -> None:
    if len(params["missing"]) > MAX_WATCHED_PATHS:
        raise invalid_request(f"fs/watchMissing watches at most {MAX_WATCHED_PATHS} paths")

