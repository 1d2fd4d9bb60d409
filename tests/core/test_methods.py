"""The registry of methods (`execproto._methods`) against the server and what reads it.

Adding a method is its registry entry and its handler; these tests then say what else is
missing: a method served but not in the registry (or the other way round), an extension
initialize does not announce, an example the method's own parser refuses, a kind the fuzzer
cannot draw, a table of the tests that does not name it. The server takes each method's
category (for its handshake errors) and the extensions it announces from the registry.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from execproto import ServerCore, _server
from execproto._clientside._client import _RETRY_SAFE
from execproto._methods import EXTENSION, METHODS, REFERENCE
from execproto._params import initialize

from . import test_protocol
from .harness import Harness

HANDSHAKE = ("initialize", "initialized")  # served by the core itself, not by its table
FUZZ = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_core.py"
REGISTRY = "src/execproto/_methods.py"


def served() -> dict[str, Any]:
    """What a core serves, every family made: its method table (name -> parser, category)."""
    core = ServerCore()
    for family in _server.LATER:  # the families made at their first call (forwarding, http)
        core._later(family)
    return dict(core._methods)


SERVED = served()


def _differ(label: str, have: set[str], want: set[str]) -> str:
    return (f"{label}: missing {sorted(want - have)}, not wanted {sorted(have - want)}"
            f" (the registry is {REGISTRY})")


def test_every_served_method_is_in_the_registry_and_nothing_else() -> None:
    assert set(METHODS) == set(SERVED) | set(HANDSHAKE), _differ(
        "the registry", set(METHODS), set(SERVED) | set(HANDSHAKE))


def test_the_extensions_are_those_initialize_announces() -> None:
    assert {METHODS[name].origin for name in METHODS} <= {REFERENCE, EXTENSION}
    ours = [name for name, method in METHODS.items() if method.origin == EXTENSION]
    assert list(_server._extensions()) == ours
    h = Harness()
    h.connect(1)
    assert h.handshake(1)["result"]["execproto"] == {"methods": ours}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_example_is_taken_by_the_methods_own_parser(name: str) -> None:
    example = copy.deepcopy(METHODS[name].example)
    if name == "initialize":
        initialize(example)
    elif name == "initialized":
        assert example == {}
    else:
        SERVED[name].parse(example)  # raises RpcError for params it refuses


def test_the_clients_retry_table_covers_the_registry() -> None:
    assert set(_RETRY_SAFE) == set(METHODS), _differ(
        "the client's _RETRY_SAFE", set(_RETRY_SAFE), set(METHODS))


def _fuzz_core() -> ModuleType:
    """fuzz/fuzz_core.py, loaded under a name of its own (it is no package's module)."""
    spec = importlib.util.spec_from_file_location("_fuzz_core_of_test_methods", FUZZ)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # hypothesis' composites look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_fuzzer_fuzzes_every_method_with_kinds_it_can_draw() -> None:
    fuzz = _fuzz_core()
    assert set(fuzz.KNOWN_METHODS) == set(METHODS), _differ(
        "fuzz_core's KNOWN_METHODS", set(fuzz.KNOWN_METHODS), set(METHODS))
    assert set(fuzz.SCHEMAS) == set(METHODS), _differ(
        "fuzz_core's SCHEMAS", set(fuzz.SCHEMAS), set(METHODS))
    # The event sequences send every method too, not only the message fuzzer.
    assert set(fuzz.SEQUENCE_METHODS) == set(METHODS), _differ(
        "fuzz_core's SEQUENCE_METHODS", set(fuzz.SEQUENCE_METHODS), set(METHODS))
    assert set(fuzz.SEQUENCE_PARAMS) == set(METHODS), _differ(
        "fuzz_core's SEQUENCE_PARAMS", set(fuzz.SEQUENCE_PARAMS), set(METHODS))
    kinds = {kind.rstrip("?") for schema in fuzz.SCHEMAS.values() for kind in schema.values()}
    assert kinds <= set(fuzz.VALID), f"no valid values for kinds {kinds - set(fuzz.VALID)}"
    assert kinds <= set(fuzz.TRICKY), f"no tricky values for kinds {kinds - set(fuzz.TRICKY)}"


def test_the_protocol_tests_call_every_method() -> None:
    called = set(test_protocol.VALID)
    assert called == set(METHODS) - set(HANDSHAKE), _differ(
        "test_protocol's VALID", called, set(METHODS) - set(HANDSHAKE))


def test_the_bad_input_tests_break_every_field_of_every_method() -> None:
    bad_input = pytest.importorskip("adapters.test_bad_input")
    wanted = set(METHODS) - {"initialized"}  # a notification has no answer to check
    for label, table in (("METHODS", bad_input.METHODS), ("STRUCTS", bad_input.STRUCTS),
                         ("VALID", bad_input.VALID)):
        assert set(table) == wanted, _differ(f"test_bad_input's {label}", set(table), wanted)
    for name, fields in bad_input.METHODS.items():  # each field of the registry's schema
        broken = {field.split(".")[0] for field in fields}
        assert broken == set(METHODS[name].schema), _differ(
            f"test_bad_input's fields of {name}", broken, set(METHODS[name].schema))
