"""The registry's word on each method's origin, held to the reference: it answers every method
the registry calls the reference's (a params error for params ``"x"``, so nothing runs) and
none the registry calls execproto's extension (-32601); and each capability flag the registry
names is one the reference announces. One reference over stdio, about a second."""

from __future__ import annotations

from pathlib import Path

import pytest
from reference import REFERENCE, WHY_MISSING, over_stdio

from execproto._methods import EXTENSION, METHODS
from execproto._methods import REFERENCE as OF_THE_REFERENCE

INVALID_PARAMS, METHOD_NOT_FOUND = -32602, -32601

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)


def test_the_reference_answers_its_methods_and_not_the_extensions(tmp_path: Path) -> None:
    calls = [name for name in METHODS if name not in ("initialize", "initialized")]
    with over_stdio(tmp_path) as reference:
        greeting = reference.call(0, "initialize", {"clientName": "registry"})["result"]
        assert isinstance(greeting, dict)
        announced = greeting["environmentInfo"]["capabilities"]
        reference.notify("initialized", {})
        expected = {OF_THE_REFERENCE: INVALID_PARAMS, EXTENSION: METHOD_NOT_FOUND}
        wrong = {}
        for msg_id, name in enumerate(calls, 1):
            error = reference.call(msg_id, name, "x")["error"]
            assert isinstance(error, dict)
            if error["code"] != expected[METHODS[name].origin]:
                wrong[name] = (METHODS[name].origin, error)
    assert not wrong, f"the registry's origin vs the reference's answer: {wrong}"
    # Each capability the registry names is a flag of the reference's.
    named = {method.capability for method in METHODS.values()} - {""}
    assert named <= set(announced), f"not the reference's flags: {named - set(announced)}"
