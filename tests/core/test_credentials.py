"""Credential masking's decisions (`execproto._credentials`): the providers and their checks,
the dummies and the child's environment as the reference gives them, and the one place a real
value goes back: a bound destination's header."""

from __future__ import annotations

import base64
import itertools
import json
import re
from typing import Any

import pytest

from execproto import RpcError
from execproto._credentials import (
    BROKER_ACTIVE,
    BROKERED,
    Destination,
    Provider,
    ProviderConfig,
    active_providers,
    dummy_value,
    intercepts,
    mask_environment,
    masks_command,
    substitute,
)
from execproto._netproxy_params import parse_launch

PROXY = {"enabled": True, "enableSocks5": True, "enableSocks5Udp": True,
         "allowUpstreamProxy": True, "dangerouslyAllowAllUnixSockets": False, "mode": "full",
         "allowLocalBinding": False}
BASH = ("bash", "-c", "env")
GH = "ghp_" + "C" * 36
OPENAI = "sk-proj-" + "D" * 48
CUSTOM = {"env": ["MY_CUSTOM_TOKEN"], "patterns": ["^customsecret-[0-9a-f]+$"],
          "url_prefixes": ["https://api.example.com/"], "auth": ["bearer"]}


def counter() -> Any:
    """Deterministic "random" bytes: what the adapter's draw gives, predictably."""
    numbers = itertools.count(7)
    return lambda n: bytes(next(numbers) % 256 for _ in range(n))


def masked(env: dict[str, str], providers: dict[str, Any] | None = None,
           argv: tuple[str, ...] = BASH) -> Any:
    configs = parse_launch({"proxy": dict(PROXY, credentialMasking=True,
                                          credentialProviders=providers or {})}).proxy
    active, _, inactive = active_providers(configs.credential_providers, env)
    draw = counter()
    return mask_environment(argv, env, active,
                            lambda provider, _, real: dummy_value(provider, real, draw),
                            inactive)


# -- params ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("providers", "message"), [
    ({"mine": {"x": 1}}, "unknown field `x`, expected one of `env`, `patterns`, "
     "`url_prefixes`, `url_prefix_from_env`, `auth`, `header`, `prefix`"),
    ({"mine": {"env": "MY"}}, 'invalid type: string "MY", expected a sequence'),
    ({"mine": {"auth": ["weird"]}},
     "unknown variant `weird`, expected one of `bearer`, `token`, `basic`, `header`"),
    ({"mine": {"auth": "bearer"}}, 'invalid type: string "bearer", expected a sequence'),
    ([], "invalid type: sequence, expected a map"),
    (None, "invalid type: null, expected a map"),
])
def test_providers_are_read_as_the_reference_reads_them(providers: Any, message: str) -> None:
    with pytest.raises(RpcError) as caught:
        parse_launch({"proxy": dict(PROXY, credentialProviders=providers)})
    assert (caught.value.code, caught.value.message) == (-32602, message)


def test_masking_must_be_a_boolean() -> None:
    for value, shown in ((1, "integer `1`"), (None, "null")):
        with pytest.raises(RpcError) as caught:
            parse_launch({"proxy": dict(PROXY, credentialMasking=value)})
        assert caught.value.message == f"invalid type: {shown}, expected a boolean"


def test_a_map_entry_for_auth_and_an_empty_array_are_accepted() -> None:
    proxy = parse_launch({"proxy": dict(PROXY, credentialMasking=True, credentialProviders={
        "a": {"auth": [{"bearer": None}]}, "b": []})}).proxy
    assert proxy.credential_masking
    assert proxy.credential_providers == (ProviderConfig(name="a", auth=("bearer",)),
                                          ProviderConfig(name="b"))


# -- providers ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "error"), [
    ({"env": []}, "credential provider `mine` has no environment keys"),
    ({"env": ["GH_TOKEN"]}, "credential provider `mine` overlaps a built-in credential source"),
    ({"patterns": []}, "credential provider `mine` has no credential patterns"),
    ({"patterns": ["([bad"]}, "invalid credential pattern for provider `mine`"),
    ({"patterns": [".*"]}, "invalid credential pattern for provider `mine`"),
    ({"url_prefixes": []}, "credential provider `mine` has no destination URL prefixes"),
    ({"url_prefixes": ["http://api.example.com/"]},
     "invalid destination for credential provider `mine`"),
    ({"url_prefixes": ["https://u:p@api.example.com/"]},
     "invalid destination for credential provider `mine`"),
    ({"auth": ["header"]}, "credential provider `mine` requires a header name exactly when "
     "using header authentication"),
])
def test_a_provider_that_fails_a_check_is_dropped_with_a_log_line(
        change: dict[str, Any], error: str) -> None:
    config = parse_launch({"proxy": dict(PROXY, credentialProviders={
        "mine": dict(CUSTOM, **change)})}).proxy.credential_providers
    providers, dropped, _ = active_providers(config, {})
    assert [p.name for p in providers] == ["github", "openai"]
    assert [d.message for d in dropped] == [
        f"ignoring invalid credential provider provider=mine error={error}"]


def test_enterprise_tokens_are_bound_to_gh_host_only_when_it_is_not_github_com() -> None:
    for env, bound in (({}, False), ({"GH_HOST": "github.com"}, False),
                       ({"GH_HOST": "GHE.Corp.test."}, True)):
        providers, _, _ = active_providers((), env)
        enterprise = [p for p in providers if p.name == "github_enterprise"]
        assert bool(enterprise) == bound
        if bound:
            assert enterprise[0].destinations == (Destination("https", "ghe.corp.test",
                                                              False, 443),)


@pytest.mark.parametrize(("text", "expected"), [
    ("https://api.example.com/", Destination("https", "api.example.com", False, 443, "/")),
    ("api.example.com", Destination("https", "api.example.com", False, 443, "/")),
    ("https://*.example.com/v1", Destination("https", "example.com", True, 443, "/v1")),
    ("http://127.0.0.1:8080/x/", Destination("http", "127.0.0.1", False, 8080, "/x/")),
    ("localhost:9000", Destination("http", "localhost", False, 9000, "/")),
])
def test_destinations(text: str, expected: Destination) -> None:
    assert Destination.parse(text) == expected


def test_a_destination_matches_its_path_prefix_at_a_segment_only() -> None:
    destination = Destination.parse("https://api.example.com/v1")
    assert destination.matches("https", "api.example.com", 443, "/v1/models")
    assert destination.matches("https", "api.example.com", 443, "/v1")
    assert not destination.matches("https", "api.example.com", 443, "/v10")
    assert not destination.matches("https", "api.example.com", 443, "/v1/../admin")
    assert not destination.matches("https", "api.example.com", 443, "/v1/%2e%2e/admin")
    assert not destination.matches("http", "api.example.com", 443, "/v1")
    assert not destination.matches("https", "api.example.com", 8443, "/v1")
    assert not destination.matches("https", "evil.example.com", 443, "/v1")


# -- the child's environment ----------------------------------------------------------------------

def test_builtin_credentials_become_dummies_of_their_shape() -> None:
    result = masked({"PATH": "/bin", "GH_TOKEN": GH, "OPENAI_API_KEY": OPENAI})
    env = result.env
    assert re.fullmatch(r"ghp_masked[A-Za-z0-9]{30}", env["GH_TOKEN"])
    assert re.fullmatch(r"sk-proj-masked[A-Za-z0-9]{42}", env["OPENAI_API_KEY"])
    assert env["PATH"] == "/bin" and env[BROKER_ACTIVE] == "1"
    assert json.loads(env[BROKERED]) == [
        ["@alias:GH_TOKEN", env["GH_TOKEN"]], ["@alias:OPENAI_API_KEY", env["OPENAI_API_KEY"]],
        ["GH_TOKEN", env["GH_TOKEN"]], ["OPENAI_API_KEY", env["OPENAI_API_KEY"]]]
    assert GH not in json.dumps(env) and OPENAI not in json.dumps(env)
    assert {(b.variable, b.real) for b in result.credentials} == {
        ("GH_TOKEN", GH), ("OPENAI_API_KEY", OPENAI)}


def test_short_or_odd_values_take_the_providers_minimum_length_and_are_trimmed() -> None:
    env = masked({"GH_TOKEN": "plainvalue", "OPENAI_API_KEY": "  sk-x  ",
                  "GITHUB_TOKEN": "github_pat_" + "a-b_c" * 8}).env
    assert re.fullmatch(r"ghp_masked[A-Za-z0-9]{30}", env["GH_TOKEN"])
    assert re.fullmatch(r"sk-masked[A-Za-z0-9]{42}", env["OPENAI_API_KEY"])
    assert re.fullmatch(r"github_pat_masked[A-Za-z0-9]{34}", env["GITHUB_TOKEN"])


@pytest.mark.parametrize("argv", [("sh", "-c", "env"), ("bash", "-lc", "env"),
                                  ("/usr/bin/env",), ("bash", "-c", "env", "x"),
                                  ("bash", "--noprofile", "-c", "env")])
def test_only_bash_dash_c_is_masked(argv: tuple[str, ...]) -> None:
    result = masked({"GH_TOKEN": GH, BROKER_ACTIVE: "1"}, argv=argv)
    assert result.env == {"GH_TOKEN": GH} and not result.credentials
    assert masks_command(("/usr/bin/bash", "-c", "x"))


def test_nothing_to_mask_still_says_the_broker_is_active() -> None:
    env = masked({"PATH": "/bin"}).env
    assert env == {"PATH": "/bin", BROKER_ACTIVE: "1", BROKERED: "[]"}


def test_a_custom_dummy_keeps_the_prefix_and_matches_the_pattern() -> None:
    result = masked({"MY_CUSTOM_TOKEN": "customsecret-0123abcd0123abcd"}, {"mine": CUSTOM})
    dummy = result.env["MY_CUSTOM_TOKEN"]
    assert re.fullmatch(r"customsecret-[0-9a-f]{16}", dummy), dummy
    assert dummy != "customsecret-0123abcd0123abcd" and not result.unprotected


def test_a_value_no_pattern_matches_whole_stays_and_is_reported() -> None:
    for patterns in (["customsecret"], ["customsecret-"]):
        result = masked({"MY_CUSTOM_TOKEN": "customsecret-0123"},
                        {"mine": dict(CUSTOM, patterns=patterns)})
        assert result.env["MY_CUSTOM_TOKEN"] == "customsecret-0123" and result.unprotected


def test_a_provider_bound_by_an_unset_variable_leaves_its_value_and_says_so() -> None:
    provider = dict(CUSTOM, url_prefixes=[], url_prefix_from_env="MYURL")
    result = masked({"MY_CUSTOM_TOKEN": "customsecret-01"}, {"mine": provider})
    assert result.env["MY_CUSTOM_TOKEN"] == "customsecret-01" and result.unprotected
    result = masked({"MY_CUSTOM_TOKEN": "customsecret-01", "MYURL": "https://x.test/"},
                    {"mine": provider})
    assert result.env["MY_CUSTOM_TOKEN"] != "customsecret-01" and not result.unprotected


# -- requests -------------------------------------------------------------------------------------

def brokered(providers: dict[str, Any] | None = None, **env: str) -> Any:
    return masked(env, providers).credentials


def test_a_dummy_goes_back_to_the_real_value_only_toward_its_hosts() -> None:
    credentials = brokered(GH_TOKEN=GH, OPENAI_API_KEY=OPENAI)
    gh = next(b.dummy for b in credentials if b.variable == "GH_TOKEN")
    headers = [("Authorization", f"token {gh}"), ("Accept", gh)]
    for host in ("api.github.com", "github.com", "corp.ghe.com", "API.GitHub.com."):
        assert substitute(credentials, "https", host, 443, "/user", headers) == [
            ("Authorization", f"token {GH}"), ("Accept", gh)]
    for scheme, host, port in (("https", "api.openai.com", 443), ("https", "evil.test", 443),
                               ("http", "api.github.com", 80), ("https", "ghe.com", 443),
                               ("https", "api.github.com", 8443)):
        assert substitute(credentials, scheme, host, port, "/", headers) == headers
    assert intercepts(credentials, "api.github.com", 443)
    assert not intercepts(credentials, "api.github.com", 80)
    assert not intercepts(credentials, "example.com", 443)


def test_basic_auth_and_a_custom_header() -> None:
    header = dict(CUSTOM, auth=["header"], header="X-Api-Key", prefix="Key ")
    credentials = brokered({"mine": header}, MY_CUSTOM_TOKEN="customsecret-00ff", GH_TOKEN=GH)
    custom = next(b for b in credentials if b.variable == "MY_CUSTOM_TOKEN")
    gh = next(b for b in credentials if b.variable == "GH_TOKEN")
    assert substitute(credentials, "https", "api.example.com", 443, "/v1",
                      [("x-api-key", "Key " + custom.dummy),
                       ("Authorization", "Bearer " + custom.dummy)]) == [
        ("x-api-key", "Key customsecret-00ff"), ("Authorization", "Bearer " + custom.dummy)]
    basic = base64.b64encode(f"x-access-token:{gh.dummy}".encode()).decode()
    (_, value), = substitute(credentials, "https", "github.com", 443, "/o/r.git/info/refs",
                             [("Authorization", "Basic " + basic)])
    assert base64.b64decode(value.split()[1]) == f"x-access-token:{GH}".encode()


def test_a_header_two_credentials_claim_is_left_alone() -> None:
    credentials = brokered(GH_TOKEN=GH, GITHUB_TOKEN="ghp_" + "Z" * 36)
    one, two = (b.dummy for b in credentials)
    headers = [("Authorization", f"Bearer {one} {two}")]
    assert substitute(credentials, "https", "api.github.com", 443, "/", headers) == headers


def test_real_values_are_not_in_a_credentials_repr() -> None:
    (credential,) = brokered(GH_TOKEN=GH)
    assert GH not in repr(credential)


def test_a_provider_is_a_provider() -> None:
    assert isinstance(active_providers((), {})[0][0], Provider)
