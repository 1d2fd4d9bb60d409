"""The real `codex exec` 0.171.0 with `shell_snapshot_v2` on: a login profile runs once for
two login commands of a thread (scenarios_snapshot.py)."""

from __future__ import annotations

import re

import pytest
from reference import REFERENCE, WHY_MISSING

from .judge import Runs, facts, ran

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)


def test_the_login_profile_runs_once_for_a_scope(runs: Runs, server: str) -> None:
    """`shellSnapshotV2`: the first login command's start captures the profile's state, the
    second runs from it; both see the profile's variable (the same value: one run) and
    function."""
    found = facts(runs, server, "snapshot_profile_once", 3)
    one, two = found["outputs"]["one"], found["outputs"]["two"]
    assert ran(one, 0) and ran(two, 0), found
    assert "greet-one\n" in one and "greet-two\n" in two, found
    markers = [re.search(r"marker=(marker-\S+)", output) for output in (one, two)]
    assert markers[0] and markers[1] and markers[0][1] == markers[1][1], found
    assert found["profile_runs"] == 1, found
