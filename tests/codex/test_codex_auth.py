"""The real `codex exec` 0.171.0 connecting with a signed bearer token (an HS256 JWT in
environments.toml's ``auth_bearer_token``), to ``serve --auth signed-bearer-token`` and to the
reference's ``--ws-auth signed-bearer-token`` (scenarios_auth.py)."""

from __future__ import annotations

import pytest
from reference import REFERENCE, WHY_MISSING

from .judge import Runs, facts, ran

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)


def test_a_signed_bearer_token_lets_codex_in(runs: Runs, server: str) -> None:
    found = facts(runs, server, "signed_bearer_token", 2)
    out = found["outputs"]["call"]
    assert ran(out, 3) and out.endswith("Output:\nsigned\n"), out
    assert found["sandbox_types"], found  # the command ran on the server


def test_an_expired_signed_bearer_token_is_refused_cleanly(runs: Runs, server: str) -> None:
    found = facts(runs, server, "expired_signed_bearer_token", 2)
    assert found["answer"].startswith("HTTP/1.1 401"), found
    assert "No usable execution environment" in found["outputs"]["call"], found["outputs"]
    assert not found["reached"] and found["session_ids"] == [], found
