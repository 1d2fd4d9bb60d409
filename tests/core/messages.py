"""The reference server's error messages, as templates: the one place tests spell them."""

from __future__ import annotations


def missing(field: str) -> str:
    return f"missing field `{field}`"


def wrong(what: str, expected: str) -> str:
    return f"invalid type: {what}, expected {expected}"


def unknown_variant(value: str, expected: str) -> str:
    return f"unknown variant `{value}`, expected {expected}"


def bad_symbol(byte: int, offset: int) -> str:
    return f"Invalid symbol {byte}, offset {offset}."


def unsupported_scheme(scheme: str) -> str:
    return f"unsupported path URI scheme `{scheme}`"


def foreign_cwd(uri: str) -> str:
    return f"cwd URI `{uri}` is not valid on this exec-server host: '{uri}' is invalid on 'linux'"


def foreign_path(uri: str) -> str:
    return f"'{uri}' is invalid on 'linux'"
