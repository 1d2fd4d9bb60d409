"""``file:`` URIs to native paths and back, as pure string functions.

The protocol names every path as a ``file:`` URI so that a client on another OS cannot be
misread; a native path string is a client error, never guessed at.
"""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit

from ._errors import RpcError, invalid_params

_LOCAL_HOSTS = ("", "localhost")


def path_from_uri(uri: str, field: str) -> str:
    """The native absolute path a ``file:`` URI names on this host.

    Raises `RpcError` (-32602) for anything else: a plain path, another scheme, another host, a
    relative path, or a NUL byte (which no POSIX path can hold).
    """
    parts = urlsplit(uri)
    if parts.scheme.lower() != "file":
        raise invalid_params(f"{field} must be a file: URI, got {uri!r}")
    if parts.netloc.lower() not in _LOCAL_HOSTS:
        raise invalid_params(f"{field} names another host: {uri!r}")
    if parts.query or parts.fragment:
        raise invalid_params(f"{field} must not have a query or fragment: {uri!r}")
    path = unquote(parts.path, errors="surrogateescape")
    if not path.startswith("/"):
        raise invalid_params(f"{field} must be an absolute file: URI, got {uri!r}")
    if "\x00" in path:
        raise invalid_params(f"{field} must not contain a NUL byte")
    return path


def uri_from_path(path: str) -> str:
    """The ``file:`` URI of an absolute native path (bytes outside UTF-8 kept via surrogates)."""
    return "file://" + quote(path, safe="/", errors="surrogateescape")


def require_uri(params: dict[str, object], field: str) -> str:
    """Read ``field`` from params as a ``file:`` URI and return its native path."""
    value = params.get(field)
    if value is None:
        raise invalid_params(f"missing field `{field}`")
    if not isinstance(value, str):
        raise invalid_params(f"invalid type for `{field}`: expected a file: URI string")
    return path_from_uri(value, field)


__all__ = ["RpcError", "path_from_uri", "require_uri", "uri_from_path"]
