"""The core stays pure: no I/O, clock, randomness or concurrency modules, by source and at runtime.

Two independent checks: an AST scan of every module under ``src/execproto`` (catches an import
anywhere, even in a branch that never runs), and a fresh interpreter that imports ``execproto`` and
looks at ``sys.modules`` (catches what the scan cannot see, such as a dependency pulling one in).
Each check is also shown to fail on a planted violation, so a silent scanner cannot pass for a
clean core.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "src" / "execproto"

# Modules the core's source must not import (a name covers its submodules too).
FORBIDDEN_IMPORTS = (
    "asyncio", "trio", "anyio", "socket", "subprocess", "threading", "selectors", "select",
    "signal", "time", "random", "uuid", "os", "io", "secrets", "datetime", "pathlib", "shutil",
    "tempfile", "ssl", "http", "urllib.request", "multiprocessing", "concurrent", "ctypes",
)

# Modules that must not be loaded at all after `import execproto` in a fresh interpreter.
FORBIDDEN_LOADED = (
    "socket", "subprocess", "asyncio", "trio", "select", "selectors", "random", "uuid", "ssl",
    "signal",
)


def _forbidden(name: str) -> str | None:
    for banned in FORBIDDEN_IMPORTS:
        if name == banned or name.startswith(banned + "."):
            return banned
    return None


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Every absolute module name the tree imports, with its line.

    ``from X import y`` yields both ``X`` and ``X.y`` (so ``from urllib import request`` is
    seen as ``urllib.request``); string-literal ``__import__``/``import_module`` calls count too.
    """
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module is None:
                continue  # relative: inside the package
            names.append((node.lineno, node.module))
            names += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else None
            )
            if (
                called in ("__import__", "import_module")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.append((node.lineno, node.args[0].value))
    return names


def scan(root: Path) -> list[str]:
    """Violations under ``root`` as ``file:line: imports NAME (banned: X)``."""
    violations = []
    files = sorted(root.rglob("*.py"))
    assert files, f"no Python files under {root}"
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in _imported_names(tree):
            banned = _forbidden(name)
            if banned is not None:
                violations.append(f"{path.name}:{line}: imports {name} (banned: {banned})")
    return violations


def loaded_after_import(*modules: str) -> list[str]:
    """Forbidden modules present in a fresh interpreter after importing ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in {list(FORBIDDEN_LOADED)!r} if m in sys.modules)))\n"
    )
    # -I: no PYTHONPATH, no user site, no cwd on sys.path; the installed package is used.
    # -S is not used: the venv's site-packages (where execproto is installed) must load.
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    result: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the checks ---------------------------------------------------------------------------------


def test_core_source_imports_nothing_forbidden() -> None:
    assert scan(CORE) == []


def test_core_imports_no_io_modules_at_runtime() -> None:
    assert loaded_after_import("execproto") == []


def test_the_scan_covers_every_core_module() -> None:
    names = {p.name for p in CORE.rglob("*.py")}
    assert {"__init__.py", "_server.py", "_trace.py", "_paths.py"} <= names


# -- the checks can fail ------------------------------------------------------------------------

PLANTED = {
    "plain.py": "import socket\n",
    "dotted.py": "import os.path as p\n",
    "from_module.py": "from time import monotonic\n",
    "from_package.py": "from urllib import request\n",
    "submodule.py": "import concurrent.futures\n",
    "from_submodule.py": "from http.client import HTTPConnection\n",
    "nested.py": "def f():\n    import subprocess\n    return subprocess\n",
    "guarded.py": "try:\n    import trio\nexcept ImportError:\n    trio = None\n",
    "dunder.py": "m = __import__('random')\n",
    "importlib_call.py": "import importlib\nm = importlib.import_module('uuid')\n",
    "several.py": "import json, threading\n",
}
ALLOWED = (
    "from . import _jsonrpc\n"
    "from .os import x\n"  # relative: a module of the package, not the stdlib
    "import json, base64, heapq\n"
    "from urllib.parse import quote\n"
    "import osmosis\n"  # a prefix of a banned name is not the banned module
    "import timeit_like\n"
    "import iox\n"
)


def test_the_scanner_flags_every_planted_import(tmp_path: Path) -> None:
    for name, source in PLANTED.items():
        (tmp_path / name).write_text(source)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "deep.py").write_text("import ssl\n")
    (tmp_path / "clean.py").write_text(ALLOWED)

    flagged = scan(tmp_path)
    flagged_files = {v.split(":")[0] for v in flagged}
    assert flagged_files == set(PLANTED) | {"deep.py"}
    assert "plain.py:1: imports socket (banned: socket)" in flagged
    assert "from_package.py:1: imports urllib.request (banned: urllib.request)" in flagged
    assert "nested.py:2: imports subprocess (banned: subprocess)" in flagged
    assert "several.py:1: imports threading (banned: threading)" in flagged
    assert not any(v.startswith("clean.py") for v in flagged)


def test_the_scanner_passes_a_clean_tree_and_fails_once_a_violation_is_added(
    tmp_path: Path,
) -> None:
    (tmp_path / "clean.py").write_text(ALLOWED)
    assert scan(tmp_path) == []
    (tmp_path / "clean.py").write_text(ALLOWED + "import socket\n")
    assert scan(tmp_path) == ["clean.py:8: imports socket (banned: socket)"]


@pytest.mark.parametrize("banned", FORBIDDEN_IMPORTS)
def test_every_banned_name_is_caught(tmp_path: Path, banned: str) -> None:
    (tmp_path / "m.py").write_text(f"import {banned}\n")
    assert scan(tmp_path) == [f"m.py:1: imports {banned} (banned: {banned})"]


def test_the_runtime_check_sees_a_forbidden_module() -> None:
    assert "socket" in loaded_after_import("execproto", "socket")
    assert {"random", "uuid"} <= set(loaded_after_import("execproto", "uuid", "random"))
