"""``file:`` URIs to native paths and back, as pure string functions.

The protocol names every path as a ``file:`` URI so that a client on another OS cannot be
misread; a native path string is a client error, never guessed at. Messages are the reference's.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit

from ._errors import RpcError, internal_error, invalid_params, invalid_request

_LOCAL_HOSTS = ("", "localhost")
# Linux's PATH_MAX, the terminating NUL included: no longer path names a file, so one is
# refused before anything resolves it (resolving a megabyte of path held a worker for minutes).
PATH_MAX = 4096
TOO_LONG = "File name too long (os error 36)"
# A Windows drive ("file:///C:/x") names nothing on this host.
_DRIVE = re.compile(r"^/[A-Za-z]:")


class ForeignPath(Exception):
    """A well-formed ``file:`` URI that does not name a path on this host."""


def parse_uri(uri: str) -> str:
    """The native path of ``uri``; `RpcError` for a non-URI or an overlong path, `ForeignPath`
    for another host."""
    if len(uri) > 3 * PATH_MAX + 64:  # more than any percent-encoding of a PATH_MAX path
        raise internal_error(TOO_LONG)
    try:
        parts = urlsplit(uri)
    except ValueError as exc:  # e.g. an unbalanced "[" in the host
        raise invalid_params(f"invalid URI: {exc}") from None
    if not parts.scheme:
        raise invalid_params("invalid URI: relative URL without a base")
    if parts.scheme.lower() != "file":
        raise invalid_params(f"unsupported path URI scheme `{parts.scheme}`")
    path = unquote(parts.path, errors="surrogateescape")
    if not path.startswith("/"):
        path = "/" + path  # "file:tmp" is the URL parser's "/tmp"
    if parts.netloc.lower() not in _LOCAL_HOSTS or _DRIVE.match(path) or "\x00" in path:
        raise ForeignPath(uri)
    if len(path.encode("utf-8", "surrogatepass")) >= PATH_MAX:
        raise internal_error(TOO_LONG)
    return path


def path_from_uri(uri: str) -> str:
    """The native absolute path a ``file:`` URI names, for the fs methods."""
    try:
        return parse_uri(uri)
    except ForeignPath:
        raise invalid_request(f"'{uri}' is invalid on 'linux'") from None


def cwd_from_uri(uri: str) -> str:
    """As `path_from_uri`, for ``process/start``'s cwd (the reference words it differently)."""
    try:
        return parse_uri(uri)
    except ForeignPath:
        raise invalid_params(
            f"cwd URI `{uri}` is not valid on this exec-server host: '{uri}' is invalid on 'linux'"
        ) from None


def uri_from_path(path: str) -> str:
    """The ``file:`` URI of an absolute native path (bytes outside UTF-8 kept via surrogates).

    A relative path is refused: it names nothing on the server (whose working directory is
    not the caller's), and ``file://relative`` would name a host called ``relative``."""
    if not path.startswith("/"):
        raise ValueError(f"a path on the server must be absolute, not {path!r}")
    return "file://" + quote(path, safe="/", errors="surrogateescape")


__all__ = ["RpcError", "cwd_from_uri", "path_from_uri", "uri_from_path"]
