"""A small TOML writer for what `tomllib` reads: tables, arrays of tables, and the value types.

Written for ``environmentConfig/read``, which hands the client a selection of a config file as
TOML text: values first, then one ``[section]`` per table that holds values, separated by a blank
line, in the order the document had them. A table that holds only tables gets no header of its
own (``[mcp_servers.foo]``, not ``[mcp_servers]`` first), as the reference writes it.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"',
            "\\": "\\\\"}


def key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else string(name)


def string(text: str) -> str:
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def value(item: Any) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        if math.isnan(item):
            return "nan"
        if math.isinf(item):
            return "inf" if item > 0 else "-inf"
        return repr(item)
    if isinstance(item, str):
        return string(item)
    if isinstance(item, (datetime.datetime, datetime.date, datetime.time)):
        return item.isoformat()
    if isinstance(item, list):
        return "[" + ", ".join(value(element) for element in item) + "]"
    if isinstance(item, dict):
        if not item:
            return "{}"
        return "{ " + ", ".join(f"{key(k)} = {value(v)}" for k, v in item.items()) + " }"
    raise TypeError(f"not a TOML value: {type(item).__name__}")


def _is_table_array(item: Any) -> bool:
    return isinstance(item, list) and bool(item) and all(isinstance(e, dict) for e in item)


def _sections(table: dict[str, Any], path: list[str], out: list[str], header: str) -> None:
    lines = [f"{key(k)} = {value(v)}\n" for k, v in table.items()
             if not isinstance(v, dict) and not _is_table_array(v)]
    if lines or (path and not table) or header.startswith("[["):
        out.append((header + "\n" if path else "") + "".join(lines))
    for name, item in table.items():
        inner = [*path, name]
        dotted = ".".join(key(part) for part in inner)
        if isinstance(item, dict):
            _sections(item, inner, out, f"[{dotted}]")
        elif _is_table_array(item):
            for element in item:
                _sections(element, inner, out, f"[[{dotted}]]")


def dumps(document: dict[str, Any]) -> str:
    """The TOML text of ``document`` (a dict as `tomllib` returns, in document order)."""
    out: list[str] = []
    _sections(document, [], out, "")
    return "\n".join(out)
