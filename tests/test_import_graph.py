"""No import circle between the package's modules, except through ``if TYPE_CHECKING:``.

A circle of imports that run when a module is loaded makes import order matter: whichever
module of the circle is imported first sees the others half-initialised, so a name can be
missing depending on who imported what before, and the lazy ``import execproto`` (PEP 562)
stops being lazy once one module drags in the rest. Imports under ``if TYPE_CHECKING:`` never
run, so circles through them are allowed, but they are listed here so a new one is noticed.
Imports inside a function run only when it is called; circles through them are not checked
(nor are dynamic imports, such as the package's lazy ``__getattr__``: they too run on first use).

The graph is read from the sources with ``ast`` (nothing of the project is imported), over
the trees that pyproject's ``package-dir`` maps, so moving a module needs no change here.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME, TYPE_ONLY, DEFERRED = "runtime", "type-only", "deferred"

# The circles that close only through type-only imports, one strongly connected component each:
# a module that is called back by what it calls names its caller's type without importing it.
TYPE_ONLY_CIRCLES = frozenset({
    frozenset({"execproto._clientside._client", "execproto._clientside._client_calls",
               "execproto._clientside._client_tracks"}),
    frozenset({"execproto._lifecycle", "execproto._process", "execproto._session"}),
    # events and actions name for mypy the file calls', forwarding's and http's classes, which
    # they find at run time, at their first use (PEP 562), in the modules that subclass their
    # Event and Action
    frozenset({"execproto._forward_events", "execproto._fs_events", "execproto._http_events",
               "execproto.events"}),
    frozenset({"execproto._forward_actions", "execproto._fs_actions", "execproto._http_actions",
               "execproto.actions"}),
    frozenset({"execproto.adapters._client._client_process", "execproto.adapters.client"}),
    frozenset({"execproto.adapters._wire._connections", "execproto.adapters._wire._peer"}),
})

Edge = tuple[str, str, str]  # importer, imported, kind


def project_sources() -> dict[str, tuple[str, bool]]:
    """Dotted module name -> (source, is_package), for every file under the mapped trees."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found = {}
    for package, folder in dirs.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join((package, *(parts[:-1] if is_package else parts)))
            found[name] = (path.read_text(), is_package)
    return found


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(node: ast.AST, kind: str = RUNTIME) -> list[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement in ``node`` with its kind; never running beats running later."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(node, kind)]
    if isinstance(node, ast.If) and is_type_checking(node.test):
        return ([hit for stmt in node.body for hit in imports(stmt, TYPE_ONLY)]
                + [hit for stmt in node.orelse for hit in imports(stmt, kind)])
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and kind == RUNTIME:
        kind = DEFERRED
    return [hit for child in ast.iter_child_nodes(node) for hit in imports(child, kind)]


def import_edges(sources: dict[str, tuple[str, bool]]) -> set[Edge]:
    def known(name: str) -> str | None:  # the longest prefix that is a project module
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name or None

    edges: set[Edge] = set()
    for module, (source, is_package) in sources.items():
        own_package = module if is_package else module.rpartition(".")[0]
        for node, kind in imports(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            else:
                base = own_package.rsplit(".", node.level - 1)[0] if node.level else ""
                base = ".".join(part for part in (base, node.module) if part)
                # `from pkg import name` loads the submodule `pkg.name` when there is one.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in sources
                           else known(base) for alias in node.names]
            for target in filter(None, targets):
                edges.add((module, target, kind))
                # Importing a.b.c runs a and a.b first, unless they are this module's own
                # packages, which are already being imported when it runs.
                parts = target.split(".")
                for parent in (".".join(parts[:i]) for i in range(1, len(parts))):
                    if parent in sources and not module.startswith(parent + "."):
                        edges.add((module, parent, kind))
    return {(a, b, kind) for a, b, kind in edges if a != b}


def circles(edges: set[Edge], kinds: set[str]) -> set[frozenset[str]]:
    """Tarjan's strongly connected components of more than one module, over edges of ``kinds``."""
    graph: dict[str, set[str]] = {}
    for a, b, kind in edges:
        if kind in kinds:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_runtime_circle() -> None:
    found = circles(import_edges(project_sources()), {RUNTIME})
    assert not found, [sorted(component) for component in found]


def test_the_type_only_circles_are_the_listed_ones() -> None:
    found = circles(import_edges(project_sources()), {RUNTIME, TYPE_ONLY})
    assert found == TYPE_ONLY_CIRCLES, [sorted(component) for component in found]


PLANTED = {
    "p": ("from . import a\n", True),
    "p.a": ("from .b import B\n", False),
    "p.b": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n"
            "try:\n    from p.a import A\nexcept ImportError:\n    pass\n", False),
    "p.c": ("import p.b\ndef f():\n    from .d import x\n", False),
    "p.d": ("from . import c\n", False),
    "q": ("import p.d\n", False),
}


def test_the_scan_sees_each_kind() -> None:
    edges = import_edges(PLANTED)
    assert {("p.a", "p.b", RUNTIME), ("p.b", "p.a", RUNTIME), ("p.b", "p.c", TYPE_ONLY),
            ("p.c", "p.d", DEFERRED), ("p.d", "p.c", RUNTIME), ("q", "p", RUNTIME)} <= edges
    assert ("p.c", "p", RUNTIME) not in edges  # p.c's own package is already being imported
    assert circles(edges, {RUNTIME}) == {frozenset({"p.a", "p.b"})}
    assert circles(edges, {RUNTIME, TYPE_ONLY}) == {frozenset({"p.a", "p.b", "p.c"})}
    assert circles(edges, {RUNTIME, TYPE_ONLY, DEFERRED}) == {frozenset({"p.a", "p.b", "p.c",
                                                                          "p.d"})}
