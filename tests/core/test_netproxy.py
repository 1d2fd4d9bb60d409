"""The managed network proxy's decisions (`execproto._netproxy`), against what the reference
answered when probed (the expected texts below are its own)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from execproto._errors import INVALID_PARAMS, RpcError
from execproto._netproxy import (
    LOCAL_NO_PROXY,
    ProxyConfig,
    Question,
    Verdict,
    after_decider,
    decide,
    decider_verdict,
    decision_notification,
    is_local_address,
    matches,
    normalize_host,
    policy_request,
    proxy_env,
    refusal,
    socks_reply_code,
    timestamp,
    verdicts,
)
from execproto._netproxy_params import parse_launch, parse_managed


def raw_proxy(**over: Any) -> dict[str, Any]:
    proxy = {"enabled": True, "enableSocks5": True, "enableSocks5Udp": True,
             "allowUpstreamProxy": False, "dangerouslyAllowAllUnixSockets": False,
             "mode": "full", "allowLocalBinding": False,
             "domains": {"allowed.test": "allow", "blocked.test": "deny"}}
    proxy.update(over)
    return proxy


def launch_error(raw: Any, **kw: Any) -> str:
    with pytest.raises(RpcError) as caught:
        parse_launch(raw, **kw)
    assert caught.value.code == INVALID_PARAMS
    return caught.value.message


def without(name: str) -> dict[str, Any]:
    proxy = raw_proxy()
    del proxy[name]
    return proxy


# -- parse_launch -------------------------------------------------------------------------------

PARSE_ERRORS = [
    ("x", 'invalid type: string "x", expected struct RemoteNetworkProxyLaunchConfig'),
    ({}, "missing field `proxy`"),
    ({"proxy": None}, "invalid type: null, expected struct RemoteNetworkProxyConfig"),
    ({"proxy": {}}, "missing field `enabled`"),
    ({"proxy": without("mode")}, "missing field `mode`"),
    ({"proxy": without("allowLocalBinding")}, "missing field `allowLocalBinding`"),
    ({"proxy": raw_proxy(enabled="yes")}, 'invalid type: string "yes", expected a boolean'),
    ({"proxy": raw_proxy(enabled=None)}, "invalid type: null, expected a boolean"),
    ({"proxy": raw_proxy(mode="strict")}, "unknown variant `strict`, expected `limited` or `full`"),
    ({"proxy": raw_proxy(mode=1)}, "invalid type: number, expected string or map"),
    ({"proxy": raw_proxy(mode={})}, "invalid value: map, expected map with a single key"),
    ({"proxy": raw_proxy(mode={"limited": 1})}, "invalid type: number, expected unit"),
    ({"proxy": raw_proxy(domains=["a"])}, "invalid type: sequence, expected a map"),
    ({"proxy": raw_proxy(domains={"a.test": "maybe"})},
     "unknown variant `maybe`, expected one of `none`, `allow`, `deny`"),
    ({"proxy": raw_proxy(domains={"a.test": None})}, "invalid type: null, expected string or map"),
    ({"proxy": raw_proxy(unixSockets=["x"])},
     "invalid type: sequence, expected struct NetworkUnixSocketPermissions"),
    ({"proxy": raw_proxy(unixSockets={"/tmp/x": "what"})},
     "unknown variant `what`, expected `allow` or `deny`"),
    ({"proxy": raw_proxy(unixSockets={"/tmp/x": 1})},
     "invalid type: integer `1`, expected string or map"),
    ({"proxy": raw_proxy(unixSockets={"/a": 1.5})},
     "invalid type: floating point `1.5`, expected string or map"),
    ({"proxy": raw_proxy(reviewDomains="r.test")},
     'invalid type: string "r.test", expected a sequence'),
    ({"proxy": raw_proxy(reviewDomains=None)}, "invalid type: null, expected a sequence"),
    ({"proxy": raw_proxy(transparentTcp=None)}, "invalid type: null, expected a boolean"),
    ({"proxy": raw_proxy(), "policyDecisionTimeoutMs": -1}, "invalid number"),
    ({"proxy": raw_proxy(), "policyDecisionTimeoutMs": 1.0}, "invalid number"),
    ({"proxy": raw_proxy(), "policyDecisionTimeoutMs": 2**64}, "invalid number"),
    ({"proxy": raw_proxy(), "policyDecisionTimeoutMs": "1"},
     'invalid type: string "1", expected u64'),
    ({"proxy": raw_proxy(), "environmentId": 1}, "invalid type: number, expected a string"),
    ({"proxy": raw_proxy(), "auditMetadata": None},
     "invalid type: null, expected struct NetworkProxyAuditMetadata"),
    ({"proxy": raw_proxy(), "auditMetadata": {"model": 1}},
     "invalid type: number, expected a string"),
    ({"proxy": raw_proxy(), "auditMetadata": []},
     "invalid length 0, expected struct NetworkProxyAuditMetadata with 9 elements"),
    ({"proxy": raw_proxy(), "auditMetadata": ["a"] * 10},
     "invalid length 10, expected fewer elements in array"),
    # The checks after the shape, in the reference's order.
    ({"proxy": raw_proxy(), "policyDecisionTimeoutMs": 0},
     "network policy decision callback timeout must be nonzero"),
    ({"proxy": raw_proxy(enabled=False, transparentTcp=True), "policyDecisionTimeoutMs": 0},
     "network policy decision callback timeout must be nonzero"),
    ({"proxy": raw_proxy(enabled=False, transparentTcp=True)},
     "transparent TCP requires a managed Linux sandbox"),
    ({"proxy": raw_proxy(enabled=False, unixSockets={"rel": "allow"})},
     "invalid network proxy config: executor-local network proxy launch requires an enabled "
     "proxy"),
    ({"proxy": raw_proxy(unixSockets={"rel": "allow"}, domains={"a/b": "allow"})},
     'invalid network proxy config: invalid network.allow_unix_sockets[0]: expected a NUL-free '
     'absolute path for Linux, got "rel"'),
    ({"proxy": raw_proxy(unixSockets={"z": "allow", "/a": "allow", "b": "allow", "c": "deny"})},
     'invalid network proxy config: invalid network.allow_unix_sockets[1]: expected a NUL-free '
     'absolute path for Linux, got "b"'),
    ({"proxy": raw_proxy(unixSockets={"/a\0b": "allow"})},
     'invalid network proxy config: invalid network.allow_unix_sockets[0]: expected a NUL-free '
     'absolute path for Linux, got "/a\\0b"'),
    ({"proxy": raw_proxy(domains={"b/b": "allow", "a/a": "deny"}, reviewDomains=["0/0"])},
     "invalid network proxy config: unsupported domain pattern syntax: a/a"),
    ({"proxy": raw_proxy(reviewDomains=["z/z", "c/d"])},
     "invalid network proxy config: unsupported domain pattern syntax: z/z"),
]


@pytest.mark.parametrize(("raw", "message"), PARSE_ERRORS)
def test_parse_errors_are_the_references(raw: Any, message: str) -> None:
    assert launch_error(raw) == message


def test_the_first_bad_field_in_the_order_sent_is_the_error() -> None:
    proxy = {k: v for k, v in raw_proxy(mode="x").items() if k != "enabled"}
    assert launch_error({"proxy": proxy}) == "unknown variant `x`, expected `limited` or `full`"
    assert launch_error({"proxy": {"enabled": "no", "mode": 1}}) == \
        'invalid type: string "no", expected a boolean'
    assert launch_error({"proxy": {"mode": 1, "enabled": "no"}}) == \
        "invalid type: number, expected string or map"


PATTERN_ERRORS = [
    ("", "domain pattern is empty"),
    ("   ", "domain pattern is empty"),
    ("*.", "domain pattern is empty"),
    ("**.", "domain pattern is empty"),
    ("*..", "domain pattern is empty"),
    (".", "domain pattern is empty"),
    ("***.x.test", "unsupported repeated wildcard: ***.x.test"),
    ("**", "unsupported repeated wildcard: **"),
    ("a**b.test", "unsupported repeated wildcard: a**b.test"),
    ("*.**.x", "unsupported repeated wildcard: *.**.x"),
    ("[a]**", "unsupported repeated wildcard: [a]**"),
    ("[ab].test", "brackets are only supported for IPv6 literals or [*]: [ab].test"),
    ("[*].x", "brackets are only supported for IPv6 literals or [*]: [*].x"),
    ("[::1]x", "brackets are only supported for IPv6 literals or [*]: [::1]x"),
    ("[fe80::*]", "brackets are only supported for IPv6 literals or [*]: [fe80::*]"),
    ("**.[x]", "brackets are only supported for IPv6 literals or [*]: **.[x]"),
    ("a]b.test", "brackets are only supported for IPv6 literals or [*]: a]b.test"),
    ("{a,b}.test", "unsupported domain pattern syntax: {a,b}.test"),
    ("a b", "unsupported domain pattern syntax: a b"),
    ("a\tb", "unsupported domain pattern syntax: a\tb"),
    ("a\\b", "unsupported domain pattern syntax: a\\b"),
    (" a/b ", "unsupported domain pattern syntax:  a/b "),
    ("a**/b", "unsupported domain pattern syntax: a**/b"),
    ("[a]/b", "unsupported domain pattern syntax: [a]/b"),
]


@pytest.mark.parametrize(("pattern", "message"), PATTERN_ERRORS)
def test_pattern_errors(pattern: str, message: str) -> None:
    expected = "invalid network proxy config: " + message
    assert launch_error({"proxy": raw_proxy(domains={pattern: "deny"})}) == expected
    assert launch_error({"proxy": raw_proxy(reviewDomains=[pattern])}) == expected
    parse_launch({"proxy": raw_proxy(domains={pattern: "none"})})  # "none" is not checked


ACCEPTED_PATTERNS = ["*", "*.x.test", "**.x.test", "a*b", "x.*", "10.*", "a?b.test", "[::1]",
                     "::1", "[::1]:80", "[*]", "[*]:80", "x.test:80", "EXAMPLE.com.", "*.*.x",
                     "**.*.x", "bücher.de", "a!b", "u@a.test", "a,b", "a#b", "fe80::1%eth0",
                     " a.test ", "a_b.test", "-a.test", "a..b", ".a.test", "?", "*.*"]


@pytest.mark.parametrize("pattern", ACCEPTED_PATTERNS)
def test_patterns_the_reference_accepts(pattern: str) -> None:
    parse_launch({"proxy": raw_proxy(domains={pattern: "allow"}, reviewDomains=[pattern])})


def test_a_full_launch_is_read() -> None:
    launch = parse_launch({
        "proxy": raw_proxy(mode={"limited": None}, domains={"b.test": "deny", "a.test": "allow",
                                                            "c.test": {"none": None}},
                           unixSockets={"/s": "allow", "rel": "deny"}, reviewDomains=["r.test"],
                           whatever=1),
        "auditMetadata": {"conversationId": "c", "userEmail": None, "extra": 5},
        "environmentId": "remote", "executionId": None, "policyDecisionTimeoutMs": 2**64 - 1,
        "policyContext": {"x": 1},
    })
    assert launch.proxy == ProxyConfig(
        enabled=True, enable_socks5=True, enable_socks5_udp=True, mode="limited",
        domains=(("a.test", "allow"), ("b.test", "deny"), ("c.test", "none")),
        unix_sockets={"/s": "allow", "rel": "deny"}, review_domains=("r.test",))
    assert launch.environment_id == "remote" and launch.execution_id is None
    assert launch.decider and launch.policy_decision_timeout_ms == 2**64 - 1
    assert launch.audit_metadata["conversationId"] == "c"
    bare = parse_launch({"proxy": without("domains")})
    assert bare.proxy.domains == () and not bare.decider and bare.audit_metadata is None
    assert parse_launch({"proxy": raw_proxy(domains=None, unixSockets=None)}).proxy.domains == ()


def test_transparent_tcp_needs_the_sandbox() -> None:
    raw = {"proxy": raw_proxy(transparentTcp=True)}
    assert launch_error(raw) == "transparent TCP requires a managed Linux sandbox"
    assert parse_launch(raw, managed_linux_sandbox=True).proxy.transparent_tcp


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**65, 2**65) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
PROXY_KEYS = st.sampled_from(list(raw_proxy()) + ["unixSockets", "reviewDomains",
                                                  "transparentTcp"])


@given(JSON)
def test_arbitrary_json_is_an_rpc_error_or_a_launch(raw: Any) -> None:
    try:
        parse_launch(raw)
        parse_managed(raw)
    except RpcError as error:
        assert error.code == INVALID_PARAMS


@given(st.dictionaries(PROXY_KEYS, JSON, max_size=6), st.dictionaries(
    st.sampled_from(["auditMetadata", "environmentId", "executionId", "policyDecisionTimeoutMs"]),
    JSON, max_size=4))
def test_near_valid_json_is_an_rpc_error_or_a_launch(changes: dict[str, Any],
                                                     top: dict[str, Any]) -> None:
    try:
        parse_launch({"proxy": raw_proxy(**changes), **top})
    except RpcError as error:
        assert error.code == INVALID_PARAMS


# -- parse_managed ------------------------------------------------------------------------------

def test_managed_network() -> None:
    assert parse_managed(None) is None
    assert parse_managed({}) == parse_managed({"foo": 1})
    managed = parse_managed({"loopbackPorts": [0, 80, 65535], "allowLocalBinding": True,
                             "transparentTcp": True})
    assert managed is not None
    assert managed.loopback_ports == (0, 80, 65535) and managed.allow_local_binding
    assert managed.transparent_tcp


@pytest.mark.parametrize(("raw", "message"), [
    ("x", 'invalid type: string "x", expected struct ManagedNetworkSandboxContext'),
    ({"loopbackPorts": [65536]}, "invalid number"),
    ({"loopbackPorts": [-1]}, "invalid number"),
    ({"loopbackPorts": [1.5]}, "invalid number"),
    ({"loopbackPorts": ["1"]}, 'invalid type: string "1", expected u16'),
    ({"loopbackPorts": None}, "invalid type: null, expected a sequence"),
    ({"allowLocalBinding": None}, "invalid type: null, expected a boolean"),
    ({"transparentTcp": 1}, "invalid type: number, expected a boolean"),
])
def test_managed_network_errors(raw: Any, message: str) -> None:
    with pytest.raises(RpcError) as caught:
        parse_managed(raw)
    assert caught.value.message == message


# -- domain patterns ----------------------------------------------------------------------------

MATCHES = [
    ("*.w.test", "w.test", False), ("*.w.test", "a.w.test", True),
    ("*.w.test", "a.b.w.test", True), ("**.v.test", "v.test", True),
    ("**.v.test", "a.b.v.test", True), ("**.v.test", "xv.test", False),
    ("a*b.u.test", "ab.u.test", True), ("a*b.u.test", "a.b.u.test", True),
    ("x.*", "x.a.b", True), ("a?b.t.test", "acb.t.test", True), ("a?b.t.test", "ab.t.test", False),
    ("EXAMPLE.s.test.", "EXAMPLE.S.TEST.", True), ("*x.r.test", "x.r.test", True),
    ("*x.r.test", "a.bx.r.test", True), ("p.test:80", "p.test", True),
    ("*.*.q.test", "a.q.test", False), ("*.*.q.test", "a.b.q.test", True),
    ("**.*.o.test", "o.test", False), ("**.*.o.test", "a.o.test", True),
    ("[::1]", "::1", True), ("[::1]", "[::1]", True), ("*", "anything.at.all", True),
    ("Z.test", "z.test", True), ("a.test", "b.test", False),
]


@pytest.mark.parametrize(("pattern", "host", "expected"), MATCHES)
def test_matching(pattern: str, host: str, expected: bool) -> None:
    assert matches(pattern, host) is expected


# -- decisions ----------------------------------------------------------------------------------

DOMAINS = (("127.0.0.1", "allow"), ("allowed.test", "allow"), ("blocked.test", "deny"),
           ("localhost", "allow"), ("public.test", "allow"), ("**.m.test", "deny"),
           ("a.m.test", "allow"), ("**.n.test", "allow"), ("a.n.test", "none"),
           ("**.k.test", "none"), ("**.10.0.0.1", "allow"), ("8.8.8.8", "allow"))
FULL = ProxyConfig(enable_socks5=True, domains=DOMAINS)
LIMITED = attrs.evolve(FULL, mode="limited")
LOCAL = attrs.evolve(FULL, allow_local_binding=True)
PUBLIC = ("93.184.216.34",)


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return True


def ask(host: str, protocol: str = "http", port: int = 80, method: str | None = "GET",
        addresses: tuple[str, ...] = ()) -> Question:
    return Question(protocol=protocol, host=host, port=port, method=method,  # type: ignore
                    client="127.0.0.1:52216", addresses=addresses)


def said(found: tuple[Verdict, ...]) -> list[tuple[str, str, str, str]]:
    return [(v.decision, v.reason, v.source, v.scope) for v in found]


DENY_BASE = ("deny", "denied", "baseline_policy", "domain")
ALLOW_BASE = ("allow", "allow", "baseline_policy", "domain")
NOT_ALLOWED = ("deny", "not_allowed", "baseline_policy", "domain")
LOCAL_DENY = ("deny", "not_allowed_local", "baseline_policy", "domain")
METHOD = ("deny", "method_not_allowed", "mode_guard", "non_domain")
MITM = ("deny", "mitm_required", "mode_guard", "non_domain")
ASK = ("ask", "not_allowed", "baseline_policy", "domain")

DECISIONS = [
    (FULL, ask("blocked.test"), [DENY_BASE]),
    (FULL, ask("BLOCKED.test."), [DENY_BASE]),
    (FULL, ask("a.m.test", addresses=PUBLIC), [DENY_BASE]),
    (FULL, ask("other.test"), [NOT_ALLOWED]),
    (FULL, ask("allowed.test"), [LOCAL_DENY]),  # allowlisted, did not resolve
    (FULL, ask("allowed.test", addresses=("10.0.0.1",)), [LOCAL_DENY]),
    (FULL, ask("allowed.test", addresses=PUBLIC + ("127.0.0.1",)), [LOCAL_DENY]),
    (FULL, ask("allowed.test", addresses=PUBLIC), [ALLOW_BASE]),
    (FULL, ask("a.n.test", addresses=PUBLIC), [ALLOW_BASE]),  # "none" takes nothing away
    (FULL, ask("a.k.test", addresses=PUBLIC), [NOT_ALLOWED]),
    (FULL, ask("127.0.0.1", port=4000, addresses=("127.0.0.1",)), [ALLOW_BASE]),
    (FULL, ask("localhost", addresses=("127.0.0.1",)), [ALLOW_BASE]),
    (FULL, ask("10.0.0.1", addresses=("10.0.0.1",)), [LOCAL_DENY]),  # a wildcard is not explicit
    (FULL, ask("10.9.9.9"), [LOCAL_DENY]),
    (FULL, ask("[::1]"), [LOCAL_DENY]),
    (FULL, ask("8.8.8.8"), [ALLOW_BASE]),
    (FULL, ask("1.1.1.1"), [NOT_ALLOWED]),
    (LOCAL, ask("127.0.0.2"), [NOT_ALLOWED]),
    (LOCAL, ask("allowed.test"), [ALLOW_BASE]),
    (LIMITED, ask("public.test", addresses=PUBLIC), [ALLOW_BASE]),
    (LIMITED, ask("public.test", method="HEAD", addresses=PUBLIC), [ALLOW_BASE]),
    (LIMITED, ask("public.test", method="OPTIONS", addresses=PUBLIC), [ALLOW_BASE]),
    (LIMITED, ask("public.test", method="POST", addresses=PUBLIC), [ALLOW_BASE, METHOD]),
    (LIMITED, ask("public.test", method="get", addresses=PUBLIC), [ALLOW_BASE, METHOD]),
    (LIMITED, ask("blocked.test", method="POST"), [DENY_BASE]),
    (LIMITED, ask("other.test", method="POST"), [NOT_ALLOWED]),
    (LIMITED, ask("public.test", "https_connect", 443, "CONNECT", PUBLIC), [ALLOW_BASE, MITM]),
    (LIMITED, ask("blocked.test", "https_connect", 443, "CONNECT"), [DENY_BASE]),
    (LIMITED, ask("blocked.test", "socks5_tcp", 80, None), [METHOD]),
    (LIMITED, ask("public.test", "socks5_tcp", 80, None, PUBLIC), [METHOD]),
    (LIMITED, ask("public.test", "socks5_tcp", 443, None, PUBLIC), [ALLOW_BASE, MITM]),
    (LIMITED, ask("public.test", "socks5_udp", 53, None, PUBLIC), [METHOD]),
    (FULL, ask("public.test", "socks5_tcp", 80, None, PUBLIC), [ALLOW_BASE]),
    (FULL, ask("public.test", "https_connect", 443, "CONNECT", PUBLIC), [ALLOW_BASE]),
]


@pytest.mark.parametrize(("config", "question", "expected"), DECISIONS)
def test_decisions(config: ProxyConfig, question: Question, expected: list[Any]) -> None:
    assert said(verdicts(config, question, decider=False)) == expected
    assert said((decide(config, question, False),)) == expected[-1:]


REVIEW = attrs.evolve(FULL, review_domains=("allowed.test", "public.test", "blocked.test"))


@pytest.mark.parametrize(("question", "with_decider", "without"), [
    (ask("other.test"), ASK, NOT_ALLOWED),
    (ask("public.test", addresses=PUBLIC), ASK, NOT_ALLOWED),  # allowlisted but reviewed
    (ask("blocked.test"), DENY_BASE, DENY_BASE),  # deny wins over review, never asked
    (ask("10.9.9.9"), LOCAL_DENY, LOCAL_DENY),  # local literals are never asked about
])
def test_who_is_asked(question: Question, with_decider: Any, without: Any) -> None:
    assert said(verdicts(REVIEW, question, True)) == [with_decider]
    assert said(verdicts(REVIEW, question, False)) == [without]


ALLOWED_BY_DECIDER = ("allow", "not_allowed", "decider", "domain")


@pytest.mark.parametrize(("result", "expected"), [
    ({"decision": {"type": "allow"}}, ALLOWED_BY_DECIDER),
    ({"decision": {"type": "allow"}, "extra": 1}, ALLOWED_BY_DECIDER),
    ({"decision": {"type": "deny", "reason": "nope"}}, ("deny", "nope", "decider", "domain")),
    ({"decision": {"type": "deny"}}, ("deny", "not_allowed", "decider", "domain")),
    ({"decision": {"type": "deny", "reason": ""}}, ("deny", "policy_denied", "decider", "domain")),
    ({"decision": {"type": "ask", "reason": "hmm"}}, ("ask", "hmm", "decider", "domain")),
    ({"decision": "allow"}, ("deny", "not_allowed", "decider", "domain")),
    ({"bogus": 1}, ("deny", "not_allowed", "decider", "domain")),
    (None, ("deny", "not_allowed", "decider", "domain")),  # an error answer, or no answer
    ({"decision": {"type": "deny", "reason": 5}}, ("deny", "not_allowed", "decider", "domain")),
])
def test_decider_answers(result: Any, expected: Any) -> None:
    verdict = decider_verdict(result)
    assert said((verdict,)) == [expected]
    assert verdict.policy_override is (verdict.decision == "allow")


def test_after_the_decider() -> None:
    allow = decider_verdict({"decision": {"type": "allow"}})
    deny = decider_verdict({"decision": {"type": "deny", "reason": "no"}})
    # An allowed name must still have resolved to public addresses.
    assert said(after_decider(FULL, ask("other.test"), allow)) == [LOCAL_DENY]
    assert said(after_decider(FULL, ask("other.test", addresses=PUBLIC), allow)) == \
        [ALLOWED_BY_DECIDER]
    assert said(after_decider(FULL, ask("127.0.0.1"), allow)) == [ALLOWED_BY_DECIDER]
    assert said(after_decider(LOCAL, ask("other.test"), allow)) == [ALLOWED_BY_DECIDER]
    assert said(after_decider(LIMITED, ask("o.test", method="POST", addresses=PUBLIC), allow)) \
        == [ALLOWED_BY_DECIDER, METHOD]
    assert after_decider(FULL, ask("other.test", addresses=PUBLIC), deny) == (deny,)


# -- properties ---------------------------------------------------------------------------------

LABEL = st.text("abcxyz09-", min_size=1, max_size=4)
HOSTS = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
PATTERNS = st.one_of(
    HOSTS, HOSTS.map("*.{}".format), HOSTS.map("**.{}".format), st.just("*"),
    st.tuples(LABEL, LABEL).map(lambda p: f"{p[0]}*{p[1]}"))
PERMISSIONS = st.sampled_from(["allow", "deny", "none"])
ADDRESSES = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str))
QUESTIONS = st.builds(
    Question, protocol=st.sampled_from(["http", "https_connect", "socks5_tcp", "socks5_udp"]),
    host=st.one_of(HOSTS, ADDRESSES, st.just("localhost")), port=st.integers(1, 65535),
    method=st.sampled_from([None, "GET", "POST", "CONNECT", "HEAD"]),
    addresses=st.lists(ADDRESSES, max_size=3).map(tuple))
CONFIGS = st.builds(
    ProxyConfig, mode=st.sampled_from(["limited", "full"]), allow_local_binding=st.booleans(),
    domains=st.lists(st.tuples(PATTERNS, PERMISSIONS), max_size=5).map(tuple),
    review_domains=st.lists(PATTERNS, max_size=2).map(tuple))
ANSWERS = st.sampled_from([{"decision": {"type": "allow"}}, {"decision": {"type": "deny"}},
                           None, {"decision": {"type": "ask"}}])


def ruling(config: ProxyConfig, question: Question, decider: bool, answer: Any) -> Verdict:
    found = verdicts(config, question, decider)
    if found[-1].decision == "ask":
        assert decider
        found = after_decider(config, question, decider_verdict(answer))
    return found[-1]


@given(CONFIGS, QUESTIONS, st.booleans(), ANSWERS, PATTERNS)
def test_a_denied_host_is_never_allowed(config: ProxyConfig, question: Question, decider: bool,
                                        answer: Any, pattern: str) -> None:
    config = attrs.evolve(config, domains=config.domains + ((pattern, "deny"),))
    if matches(pattern, question.host):
        verdict = ruling(config, question, decider, answer)
        assert verdict.decision == "deny"


@given(CONFIGS, QUESTIONS, st.booleans(), ANSWERS)
def test_without_local_binding_local_addresses_need_an_exact_entry(
        config: ProxyConfig, question: Question, decider: bool, answer: Any) -> None:
    """No local destination gets through unless the host is a local literal that an allow entry
    names exactly (the reference's one exception); a name gets through only when it resolved,
    and to public addresses only."""
    config = attrs.evolve(config, allow_local_binding=False)
    if not ruling(config, question, decider, answer).allowed:
        return
    host = normalize_host(question.host)
    if host == "localhost" or is_local_address(host):
        assert (host, "allow") in [(normalize_host(p), g) for p, g in config.domains]
    elif not is_address(host):
        assert question.addresses
        assert not any(is_local_address(address) for address in question.addresses)


@given(CONFIGS, QUESTIONS, st.booleans())
def test_there_is_always_one_ruling_and_asks_only_with_a_decider(
        config: ProxyConfig, question: Question, decider: bool) -> None:
    found = verdicts(config, question, decider)
    assert 1 <= len(found) <= 2
    assert all(v.decision != "ask" for v in found[:-1])
    if found[-1].decision == "ask":
        assert decider
    if len(found) == 2:
        assert found[0].allowed and found[1].source == "mode_guard"
    if config.mode == "full":
        assert all(v.source != "mode_guard" for v in found)


# -- what goes out ------------------------------------------------------------------------------

def test_policy_request() -> None:
    assert policy_request("p", ask("Other.Test.", port=8080)) == {
        "processId": "p", "request": {"protocol": "http", "host": "other.test", "port": 8080}}


def test_notification_fields_and_order() -> None:
    question = ask("other.test")
    params = decision_notification("p", 1796362973.6339, question, decide(FULL, question, False))
    assert json.dumps(params, separators=(",", ":")) == (
        '{"processId":"p","timestamp":"2026-12-04T05:42:53.633Z","scope":"domain",'
        '"decision":"deny","source":"baseline_policy","reason":"not_allowed","protocol":"http",'
        '"host":"other.test","port":80,"method":"GET","client":"127.0.0.1:52216",'
        '"policyOverride":false}')
    socks = ask("[::1]", "socks5_tcp", 443, None)
    params = decision_notification("p", 0, socks, decider_verdict({"decision": {"type": "allow"}}))
    assert "method" not in params and params["policyOverride"] is True
    assert params["host"] == "::1"


@pytest.mark.parametrize(("wall", "text"), [
    (0, "1970-01-01T00:00:00.000Z"),
    (1796362973.633, "2026-12-04T05:42:53.633Z"),
    (951782400.0999, "2000-02-29T00:00:00.099Z"),
    (4107542399.9999, "2100-02-28T23:59:59.999Z"),
    (1709251199.5, "2024-02-29T23:59:59.500Z"),
])
def test_timestamps(wall: float, text: str) -> None:
    assert timestamp(wall) == text


REFUSALS = [
    ("denied", "baseline_policy", "blocked-by-denylist", "Domain denied by the sandbox policy."),
    ("not_allowed", "baseline_policy", "blocked-by-allowlist", "Domain not in allowlist."),
    ("not_allowed_local", "baseline_policy", "blocked-by-allowlist",
     "Sandbox policy blocks local/private network addresses."),
    ("method_not_allowed", "mode_guard", "blocked-by-method-policy",
     "Method not allowed in limited mode."),
    ("mitm_required", "mode_guard", "blocked-by-mitm-required", "MITM required for limited HTTPS."),
    ("nope", "decider", "blocked-by-policy", "Request blocked by network policy."),
]


@pytest.mark.parametrize(("reason", "source", "header", "message"), REFUSALS)
def test_refusals(reason: str, source: str, header: str, message: str) -> None:
    verdict = Verdict(decision="deny", reason=reason, source=source)
    status, headers, body = refusal(ask("Blocked.Test"), verdict)
    assert status == 403
    assert headers == [("content-type", "application/json"), ("x-proxy-error", header)]
    assert body.decode() == (
        f'{{"status":"blocked","host":"blocked.test","reason":"{reason}","decision":"deny",'
        f'"source":"{source}","protocol":"http","port":80,"message":"{message}"}}')
    status, headers, body = refusal(ask("b.test", "https_connect", 443, "CONNECT"), verdict)
    assert (status, headers, body) == (
        403, [("content-type", "text/plain"), ("x-proxy-error", header)], message.encode())
    assert socks_reply_code(verdict) == 0x02


def test_an_ask_refusal_says_ask_and_socks_has_no_http_refusal() -> None:
    verdict = decider_verdict({"decision": {"type": "ask", "reason": "hmm"}})
    body = json.loads(refusal(ask("o.test"), verdict)[2])
    assert (body["decision"], body["source"], body["reason"]) == ("ask", "decider", "hmm")
    with pytest.raises(ValueError):
        refusal(ask("o.test", "socks5_tcp", 80, None), verdict)
    assert socks_reply_code(decider_verdict({"decision": {"type": "allow"}})) == 0


# -- the child's environment --------------------------------------------------------------------

HTTP_VARIABLES = ["BUNDLE_HTTPS_PROXY", "BUNDLE_HTTP_PROXY", "DOCKER_HTTPS_PROXY",
                  "DOCKER_HTTP_PROXY", "HTTPS_PROXY", "HTTP_PROXY", "NPM_CONFIG_HTTPS_PROXY",
                  "NPM_CONFIG_HTTP_PROXY", "NPM_CONFIG_PROXY", "PIP_PROXY", "WSS_PROXY",
                  "WS_PROXY", "YARN_HTTPS_PROXY", "YARN_HTTP_PROXY", "http_proxy", "https_proxy",
                  "npm_config_http_proxy", "npm_config_https_proxy", "npm_config_proxy",
                  "ws_proxy", "wss_proxy"]
SOCKS_VARIABLES = ["ALL_PROXY", "FTP_PROXY", "all_proxy", "ftp_proxy"]
NO_PROXY_VARIABLES = ["BUNDLE_NO_PROXY", "NO_PROXY", "NPM_CONFIG_NOPROXY", "no_proxy",
                      "npm_config_noproxy"]


def test_proxy_env_as_the_reference_sets_it() -> None:
    env = proxy_env(FULL, 42937, 34651)
    expected = {name: "http://127.0.0.1:42937" for name in HTTP_VARIABLES}
    expected.update({name: "socks5h://127.0.0.1:34651" for name in SOCKS_VARIABLES})
    expected.update({name: "" for name in NO_PROXY_VARIABLES})
    expected.update({"CODEX_NETWORK_ALLOW_LOCAL_BINDING": "0", "CODEX_NETWORK_PROXY_ACTIVE": "1",
                     "ELECTRON_GET_USE_PROXY": "true", "NODE_USE_ENV_PROXY": "1"})
    assert env == expected


def test_proxy_env_without_socks_and_with_local_binding() -> None:
    env = proxy_env(LOCAL, 36561, None)
    assert {env[name] for name in HTTP_VARIABLES + SOCKS_VARIABLES} == {"http://127.0.0.1:36561"}
    assert {env[name] for name in NO_PROXY_VARIABLES} == {LOCAL_NO_PROXY}
    assert LOCAL_NO_PROXY == "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
    assert env["CODEX_NETWORK_ALLOW_LOCAL_BINDING"] == "1"
