"""The real `codex exec` 0.171.0 with an MCP server reached through the executor, and a bearer
token only the executor holds (scenarios_mcp.py)."""

from __future__ import annotations

import pytest
from reference import REFERENCE, WHY_MISSING

from .judge import Runs, facts
from .scenarios_mcp import CLIENT_TOKEN, EXECUTOR_TOKEN

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)


def test_an_mcp_server_gets_the_executors_token(runs: Runs, server: str) -> None:
    """`httpHeaderEnvVars`: codex sends the header with `valueEnvVar`, the executor fills in its
    own variable, and the MCP server (reached by `http/request`) is asked for its tools."""
    found = facts(runs, server, "mcp_executor_token", 1)
    assert found["methods"][:2] == ["initialize", "notifications/initialized"], found
    assert "tools/list" in found["methods"], found
    assert set(found["tokens"]) == {f"Bearer {EXECUTOR_TOKEN}"}, found["tokens"]
    assert not any(CLIENT_TOKEN in token for token in found["tokens"])


def test_an_mcp_server_in_the_executors_config_is_kept_and_gets_its_token(
        runs: Runs, server: str) -> None:
    """An HTTP MCP server with a token in the executor's own config.toml (read by codex through
    `environmentConfig/read`): codex drops it unless the executor announces
    `httpHeaderEnvVars`; kept, it is reached with the executor's token."""
    found = facts(runs, server, "mcp_executor_config", 1)
    assert "tools/list" in found["methods"], found
    assert set(found["tokens"]) == {f"Bearer {EXECUTOR_TOKEN}"}, found["tokens"]
