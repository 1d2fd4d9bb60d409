"""The real `codex exec` 0.171.0 runs `apply_patch` from the shell on the executor, as the
reference's own alias does (scenarios_apply_patch.py)."""

from __future__ import annotations

import pytest
from reference import REFERENCE, WHY_MISSING

from .judge import Runs, facts, ran

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)


def test_apply_patch_runs_from_the_shell(runs: Runs, server: str) -> None:
    found = facts(runs, server, "apply_patch_piped", 3)
    assert ran(found["outputs"]["found"], 0) and "both-found" in found["outputs"]["found"], found
    piped = found["outputs"]["piped"]
    assert "Success. Updated the following files:\nA piped.txt\nM notes.txt\n" in piped, found
    assert "status=0" in piped, found
    assert (found["notes"], found["piped"]) == ("new\n", "piped through the shell\n"), found
