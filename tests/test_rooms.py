"""Each room of the adapters imports only what its folder's ``__init__`` docstring says it uses.

The rooms (`_wire`, `_processes`, `_files`, `_http`, `_forward`, `_proxy`, `_client`) are
independent of each other, and `_serving` owns them; the table below is those docstrings'
rules, so a new import across rooms fails here until the rule (and its docstring) says so.
Every import counts: at the top, in a function, or for types only.
"""

from __future__ import annotations

import ast
from pathlib import Path

ADAPTERS = Path(__file__).resolve().parent.parent / "src" / "adapters"

# room -> what of the adapters outside itself it may import (a module, or a room whole).
# `_loop`, `_shares` and `_system` are the shared event loop, worker shares and words of the
# OS; `backends` the backend interface and its refusals.
ROOMS: dict[str, set[str]] = {
    "_wire": {"_loop"},
    "_files": {"_loop", "_shares", "_system"},
    "_http": {"_loop", "_shares"},
    "_forward": {"_loop", "backends"},
    "_proxy": {"_loop", "backends"},
    "_processes": {"_loop", "_shares", "_system", "_proxy"},
    "_client": {"client"},
    "_serving": {"_loop", "_shares", "_system", "backends", "_wire", "_processes", "_files",
                 "_http", "_forward", "_proxy"},
}


def imported(path: Path, source: str) -> set[str]:
    """The adapters' modules ``source`` (the file at ``path``) imports, dotted from the
    adapters' package (``_processes._posix``, ``backends``)."""
    parts = list(path.relative_to(ADAPTERS).with_suffix("").parts)
    package = parts[:-1]  # an __init__'s package is its folder, as any module's
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + (node.module.split(".") if node.module else []))
            elif (node.module or "").startswith("execproto.adapters."):
                module = (node.module or "").removeprefix("execproto.adapters.")
            else:
                continue
            # `from .._processes import _posix` is `_processes._posix`, `from ..backends import
            # Refused` is `backends.Refused`: either way the name says where it comes from.
            found |= {f"{module}.{alias.name}".lstrip(".") for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name.removeprefix("execproto.adapters.") for alias in node.names
                      if alias.name.startswith("execproto.adapters.")}
    return found


def crossings(room: str, path: Path, source: str) -> set[str]:
    """What the room's file imports from outside the room that its rule does not allow."""
    allowed = ROOMS[room]
    return {name for name in imported(path, source)
            if name.split(".")[0] != room
            and not any(name == rule or name.startswith(rule + ".") for rule in allowed)}


def test_each_room_imports_only_what_its_rule_allows() -> None:
    offenders = {}
    for room in ROOMS:
        for path in sorted((ADAPTERS / room).rglob("*.py")):
            if found := crossings(room, path, path.read_text()):
                offenders[str(path.relative_to(ADAPTERS))] = sorted(found)
    assert offenders == {}


def test_every_room_has_a_rule() -> None:
    folders = {path.parent.name for path in ADAPTERS.glob("_*/__init__.py")}
    assert folders - {"_command"} == set(ROOMS)  # the command line's parts sit above them all


def test_the_scan_sees_each_kind() -> None:
    path = ADAPTERS / "_wire" / "_peer.py"
    planted = ("from .._processes import _posix\nfrom ..backends import Refused\n"
               "def f():\n    from execproto.adapters._serving import _driver\n"
               "from . import _ws\nfrom .. import _loop\n")
    assert crossings("_wire", path, planted) == {"_processes._posix", "backends.Refused",
                                                 "_serving._driver"}
