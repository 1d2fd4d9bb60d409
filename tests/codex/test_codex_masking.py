"""The real `codex exec` 0.171.0 with credential masking on (scenarios_masking.py)."""

from __future__ import annotations

import re

import pytest
from reference import REFERENCE, WHY_MISSING

from .judge import Runs, facts, ran
from .scenarios_masking import API, CLIENT_TOKEN, SERVER_TOKEN

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)


def test_the_command_sees_a_dummy_and_the_origin_the_real_token(runs: Runs, server: str) -> None:
    """`features.credential_masking` with `allow_login_shell = false` and a managed network:
    codex sends `credentialMasking: true`; the command's GITHUB_TOKEN (the executor's, through
    codex's envPolicy) is a same-shape dummy, and the proxy, opening the command's HTTPS to
    api.github.com with a CA of its own, puts the real token back toward the origin only."""
    found = facts(runs, server, "masking_github_token", 2)
    assert found["network_proxies"], found
    assert all(sent["proxy"]["credentialMasking"] is True
               for sent in found["network_proxies"]), found["network_proxies"]
    out = found["outputs"]["masked"]
    assert ran(out, 0), out
    shown = re.search(r"token=(\S*)", out)
    assert shown and re.fullmatch(r"ghp_masked[A-Za-z0-9]{30}", shown[1]), out
    assert SERVER_TOKEN not in out and CLIENT_TOKEN not in out, out
    assert out.endswith('{"login": "execproto-e2e"} [0]\n'), out
    assert found["origin"] == [[API, "/user", f"token {SERVER_TOKEN}"]], found["origin"]
    assert found["sandbox_types"] == ["linuxSeccomp"], found
