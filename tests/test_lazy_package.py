"""``import execproto`` is lazy (PEP 562): nothing of the core loads until a name is used, yet
every public name is there, is the object its submodule defines, and is seen by mypy.

The table in ``__init__`` and the imports under ``if TYPE_CHECKING:`` are two lists of the same
names: checked here to agree with each other and with ``__all__`` (which leaves out only the
client's events, importable from ``execproto`` for compatibility but listed in
``execproto.client_events``). Purity once everything is loaded is checked too, since
``import execproto`` alone no longer loads the core.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

from test_purity import CORE, loaded_after_import

INIT = CORE / "__init__.py"


def fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def checked_imports() -> dict[str, str]:
    """Name -> relative module, from the imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse(INIT.read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.dump(imp)
                if imp.module == "typing":
                    continue  # the annotations' own names, not the package's
                for alias in imp.names:
                    assert alias.asname == alias.name, alias.name  # `X as X`: re-exported
                    found[alias.name] = "." * imp.level + (imp.module or "")
    return found


def test_importing_the_package_loads_none_of_it() -> None:
    loaded = fresh("import execproto, json, sys\n"
                   "print(json.dumps(sorted(m for m in sys.modules if m.startswith('execproto'))))")
    assert json.loads(loaded) == ["execproto"]


def test_using_a_name_loads_only_its_side() -> None:
    loaded = json.loads(fresh(
        "import json, sys\nfrom execproto import ServerCore\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('execproto'))))"))
    assert "execproto._server" in loaded
    assert "execproto._clientside._client" not in loaded
    assert "execproto.client_events" not in loaded


def test_the_client_loads_none_of_the_server() -> None:
    loaded = json.loads(fresh(
        "import json, sys\nfrom execproto import ClientCore\nimport execproto.client_events\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('execproto'))))"))
    assert "execproto._clientside._client" in loaded
    assert not {"execproto._server", "execproto.events", "execproto.actions"} & set(loaded)


def test_the_table_the_checked_imports_and_all_name_the_same() -> None:
    import execproto

    table = execproto._WHERE
    assert checked_imports() == table
    assert sorted(execproto.__all__) == sorted(set(table) - set(execproto._COMPATIBLE))
    assert len(set(execproto.__all__)) == len(execproto.__all__)


def test_the_client_events_are_apart_and_still_importable_from_the_top() -> None:
    import execproto
    from execproto import client_events, events

    assert set(execproto._COMPATIBLE) < set(client_events.__all__)
    assert not set(execproto._COMPATIBLE) & set(execproto.__all__)
    for name in execproto._COMPATIBLE:
        assert getattr(execproto, name) is getattr(client_events, name), name
    assert {cls.__name__ for cls in client_events.CLIENT_EVENT_TYPES} <= set(client_events.__all__)
    for cls in client_events.CLIENT_EVENT_TYPES:
        assert issubclass(cls, client_events.ClientEvent) and not issubclass(cls, events.Event)


def test_every_public_name_is_its_submodules_object() -> None:
    import execproto

    for name, module in execproto._WHERE.items():
        defined = getattr(importlib.import_module(module, "execproto"), name)
        assert getattr(execproto, name) is defined, name


def test_star_import_dir_and_unknown_names() -> None:
    names = json.loads(fresh("import json\nfrom execproto import *\n"
                             "print(json.dumps([k for k in dir() if not k.startswith('_')]))"))
    import execproto

    assert set(execproto.__all__) <= set(names)
    assert set(execproto.__all__) <= set(dir(execproto))
    assert {"actions", "client_events", "events"} <= set(dir(execproto))
    assert execproto.actions.ACTION_TYPES  # a public submodule, as an attribute
    try:
        execproto.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_the_whole_core_once_loaded_is_still_pure() -> None:
    modules = sorted("execproto." + ".".join(p.relative_to(CORE).with_suffix("").parts)
                     for p in Path(CORE).rglob("*.py") if p.stem not in ("__init__", "__main__"))
    assert "execproto._server" in modules and "execproto._clientside._client" in modules
    assert loaded_after_import("execproto", *modules) == []
