"""The adapters use the core through its public modules only: no ``execproto._private`` import
in ``src/adapters`` (``execproto``, ``execproto.events``, ``execproto.actions``,
``execproto.policy``, ``execproto.trace``, ``execproto.jsonrpc``, ``execproto.descriptors``,
``execproto.client_events`` are public). So the core's private modules can be reshaped without
an adapter noticing, and what an adapter needs of the core is written down in one place."""

from __future__ import annotations

import ast
from pathlib import Path

ADAPTERS = Path(__file__).resolve().parent.parent / "src" / "adapters"


def private_core_imports(source: str) -> list[str]:
    """The private core modules ``source`` imports (``execproto._x``, at any depth), or names in
    a string, as ``importlib.import_module`` would take them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and not node.level
                 and node.module else [node.value] if isinstance(node, ast.Constant)
                 and isinstance(node.value, str) else [])
        found += [name for name in names if name.startswith("execproto._")]
    return found


def test_no_adapter_imports_a_private_core_module() -> None:
    offenders = {str(path.relative_to(ADAPTERS)): private_core_imports(path.read_text())
                 for path in sorted(ADAPTERS.rglob("*.py"))}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_scan_sees_one() -> None:
    planted = ("import os\nfrom execproto._policy import RANK\n"
               "def f():\n    import execproto._trace\n"
               "NEEDS = ('execproto._descriptors', 'execproto.descriptors')\n")
    assert sorted(private_core_imports(planted)) == [
        "execproto._descriptors", "execproto._policy", "execproto._trace"]
    assert private_core_imports("from execproto.policy import RANK\nfrom . import _fs\n") == []
