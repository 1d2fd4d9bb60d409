"""http/request headers whose value goes on with a variable of the server's environment
(``valueEnvVar``, the `httpHeaderEnvVars` capability): checked in the core as the reference
(0.171.0, probed) checks them, and carried out by the adapter, so no action and no trace line
holds the secret."""

from __future__ import annotations

from typing import Any

import pytest

from execproto import Host, HttpRequest, RunHttp
from execproto._errors import INVALID_PARAMS

from .harness import Harness
from .test_services import HTTP, http, refused

SECRET = "executor-side-secret-4711"
ENV = {"MCP_TOK": SECRET, "EMPTY": "", "NEWLINE": "a\nb", "GITHUB_TOKEN": "gh",
       "OPENAI_API_KEY": "sk-real"}


@pytest.fixture
def h() -> Harness:
    harness = Harness(host=Host(env=ENV))
    harness.connect(1)
    harness.handshake(1)
    return harness


def header(name: str, value: str, variable: Any = None) -> dict[str, Any]:
    found = {"name": name, "value": value}
    return found if variable is None else {**found, "valueEnvVar": variable}


def test_a_header_names_the_variable_and_the_action_holds_no_secret(h: Harness) -> None:
    _, run = http(h, headers=[header("accept", "*/*"),
                              header("authorization", "Bearer ", "MCP_TOK"),
                              header("x-plain", "", "GITHUB_TOKEN")])
    assert run.request.headers == (("accept", "*/*"), ("authorization", "Bearer "),
                                   ("x-plain", ""))
    assert run.request.env_values == ((1, "MCP_TOK"), (2, "GITHUB_TOKEN"))
    # The trace's first line is its header, which records the host (redacted by a Redactor,
    # which this harness does not use); no event or action after it holds the value.
    assert SECRET not in repr(h.actions) and SECRET not in "\n".join(h.lines[1:])


def test_a_null_variable_is_no_variable(h: Harness) -> None:
    _, run = http(h, headers=[{"name": "a", "value": "b", "valueEnvVar": None}])
    assert run.request == HttpRequest(method="GET", url=HTTP["url"], headers=(("a", "b"),),
                                      body=None, timeout_ms=None, stream_response=False,
                                      follow_redirects=True)


@pytest.mark.parametrize("variable, said", [
    ("NOPE", "authorization requires executor environment variable NOPE"),
    ("", "authorization requires executor environment variable "),
    ("A=B", "authorization requires executor environment variable A=B"),
    ("A\x00B", "authorization requires executor environment variable A\x00B"),
    ("EMPTY", "authorization requires a non-empty executor environment variable EMPTY"),
    ("OPENAI_API_KEY", "authorization cannot use executor environment variable OPENAI_API_KEY"),
    ("openai_api_key", "authorization cannot use executor environment variable openai_api_key"),
    ("Aws_Secret_Access_Key",
     "authorization cannot use executor environment variable Aws_Secret_Access_Key"),
    ("CODEX_GUARDIAN_DECISIONS_API_KEY",
     "authorization cannot use executor environment variable CODEX_GUARDIAN_DECISIONS_API_KEY"),
    ("NEWLINE", "value is invalid for authorization: failed to parse header value"),
])
def test_a_variable_the_header_cannot_use_is_refused(h: Harness, variable: str,
                                                      said: str) -> None:
    params = {**HTTP, "headers": [header("authorization", "Bearer ", variable)]}
    assert refused(h, "http/request", params) == (INVALID_PARAMS, f"http/request header {said}")


@pytest.mark.parametrize("headers, said", [
    ([header("bad name", "x", "MCP_TOK")], "name is invalid: invalid HTTP header name"),
    ([header("", "x")], "name is invalid: invalid HTTP header name"),
    ([header("x", "a\nb")], "value is invalid for x: failed to parse header value"),
    ([header("x", "a\x7fb")], "value is invalid for x: failed to parse header value"),
    # In order: the first header's variable is what is wrong, though the second is worse.
    ([header("a", "x", "NOPE"), header("b", "y", "OPENAI_API_KEY")],
     "a requires executor environment variable NOPE"),
    # The name before the variable.
    ([header("bad name", "x", "NOPE")], "name is invalid: invalid HTTP header name"),
])
def test_headers_are_checked_in_order_name_variable_value(h: Harness, headers: Any,
                                                          said: str) -> None:
    params = {**HTTP, "headers": headers}
    assert refused(h, "http/request", params) == (INVALID_PARAMS, f"http/request header {said}")


def test_tabs_and_non_ascii_are_header_values(h: Harness) -> None:
    _, run = http(h, headers=[header("x", "a\tb\u00e9")])
    assert isinstance(run, RunHttp) and run.request.headers == (("x", "a\tb\u00e9"),)
