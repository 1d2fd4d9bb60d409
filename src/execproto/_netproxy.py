"""Every decision of the managed network proxy, with no I/O: what `process/start`'s
``networkProxy`` and ``managedNetwork`` mean, whether a connection may go, what the client is
told and asked, what a refused client gets back, and which variables the child sees.

The listeners (an adapter) accept a connection, resolve the host, build a `Question` and ask
`verdicts`; everything they send back is built here. In order:

1. `verdicts(config, question, decider)` gives the decisions to report, in order; each is sent
   to the client as a ``network/policyDecision`` notification (`decision_notification`), and the
   last one rules. An *ask* is the exception: it is never reported; the adapter sends
   ``network/policyRequest`` (`policy_request`) and waits up to ``policyDecisionTimeoutMs``.
2. The client's answer (its ``result``, or None for an error answer or no answer in time) goes
   through `decider_verdict`, and `after_decider` gives what to report and the ruling verdict.
3. A refusal is an HTTP 403 (`refusal`) or a SOCKS5 reply (`socks_reply_code`).

The baseline policy, in the reference's order (measured):

- SOCKS5 in ``limited`` mode: UDP, and TCP to any port but 443, are refused before the host is
  looked at (``mode_guard``/``method_not_allowed``, scope ``non_domain``).
- A host matched by a ``deny`` pattern is ``denied``. Nothing overrides it; it is never asked
  about.
- Without ``allowLocalBinding``, a local literal (``localhost``, or an IP that is loopback,
  private, link-local, shared, multicast or unspecified) is ``not_allowed_local`` unless an
  ``allow`` entry names it exactly (a wildcard does not count).
- A host that no ``allow`` pattern matches, or one in ``reviewDomains``, is ``not_allowed``;
  with a decider it is an *ask* instead (reason ``not_allowed`` either way).
- Without ``allowLocalBinding``, a host that passed so far (or that the decider allowed) and is
  not an exactly allowlisted local literal must have resolved, and only to public addresses;
  otherwise ``not_allowed_local``. So an allowlisted name that does not resolve is refused.
- Allowed (reason ``allow``). Then, in ``limited`` mode, a second decision (scope
  ``non_domain``, source ``mode_guard``): HTTP methods other than GET/HEAD/OPTIONS (case
  matters) are ``method_not_allowed``; CONNECT, and SOCKS5 TCP to port 443, are
  ``mitm_required``. Both decisions are reported.

Patterns: ``*`` (any host), ``*.d`` (subdomains of d only), ``**.d`` (d and its subdomains), or
a glob in which ``*`` matches any run of characters (dots too) and ``?`` one; matching ignores
case, trailing dots, brackets around IPv6 and a ``:port``. ``none`` entries are no entries.

Confirmed against the reference (codex 0.171 exec-server, probed over its websocket: bad
``networkProxy`` values in `process/start`, then a child that spoke HTTP, CONNECT and SOCKS5 to
the proxy it was given, with a client answering ``network/policyRequest``): every parse message
and their order; the variables and the NO_PROXY list; the 403 headers, JSON body and field
order, the CONNECT refusal's plain-text body; every reason, source, scope and message here; the
notification's fields and their order (``method`` absent for SOCKS5, ``policyOverride`` true
only when the decider allowed); the decider's answers (deny without a reason keeps
``not_allowed``, an empty reason becomes ``policy_denied``, anything malformed, an error or a
timeout is a deny with reason ``not_allowed``); SOCKS5 refusals answer 0x02; the pattern
rules above; which address ranges count as local.

Inferred, not observed: SOCKS5 UDP in limited mode (the reference refused our UDP ASSOCIATE
for its address type before any policy: the rule is from its message "SOCKS5 UDP and non-HTTPS
SOCKS5 TCP are blocked in limited mode"); that the timestamp truncates to milliseconds; what
``[*]`` matches (taken as ``*``); a ``:port`` after a bracketed pattern accepted only when it
is digits. Not followed: the reference also reads a JSON array as a struct (fields in order);
here an array is a wrong type, as for every other params struct of execproto.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Literal

import attrs

from ._errors import invalid_params
from ._records import Record

Protocol = Literal["http", "https_connect", "socks5_tcp", "socks5_udp"]
PROTOCOLS: tuple[Protocol, ...] = ("http", "https_connect", "socks5_tcp", "socks5_udp")

# Reasons (the reference's words, as sent).
ALLOW = "allow"
DENIED = "denied"
NOT_ALLOWED = "not_allowed"
NOT_ALLOWED_LOCAL = "not_allowed_local"
METHOD_NOT_ALLOWED = "method_not_allowed"
MITM_REQUIRED = "mitm_required"
POLICY_DENIED = "policy_denied"  # a decider's deny with an empty reason

LIMITED_METHODS = ("GET", "HEAD", "OPTIONS")
HTTPS_PORT = 443

INVALID_CONFIG = "invalid network proxy config: "
DISABLED = INVALID_CONFIG + "executor-local network proxy launch requires an enabled proxy"
ZERO_TIMEOUT = "network policy decision callback timeout must be nonzero"
TRANSPARENT_TCP_SANDBOX = "transparent TCP requires a managed Linux sandbox"
MANAGED_TRANSPARENT_TCP = "transparent TCP requires an executor-local managed proxy"
TRANSPARENT_TCP_SOCKS5 = INVALID_CONFIG + "transparent_tcp requires an enabled managed SOCKS5 proxy"

# What a local-binding client may reach directly (the reference's NO_PROXY when allowed).
LOCAL_NO_PROXY = "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"



Auth = Literal["bearer", "token", "basic", "header"]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ProviderConfig(Record):
    """One entry of ``credentialProviders`` as sent (`_credentials` checks and applies it)."""

    name: str
    env: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    url_prefixes: tuple[str, ...] = ()
    url_prefix_from_env: str | None = None
    auth: tuple[Auth, ...] = ()
    header: str | None = None
    prefix: str | None = None


# -- configuration ------------------------------------------------------------------------------

@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ProxyConfig(Record):
    """``networkProxy.proxy``. ``domains`` keeps every entry, sorted by pattern as the reference
    holds them; ``none`` entries count for nothing."""

    enabled: bool = True
    enable_socks5: bool = False
    enable_socks5_udp: bool = False
    allow_upstream_proxy: bool = False
    dangerously_allow_all_unix_sockets: bool = False
    mode: Literal["limited", "full"] = "full"
    allow_local_binding: bool = False
    domains: tuple[tuple[str, str], ...] = ()
    unix_sockets: Any = None  # as sent (validated): {path: "allow" | "deny" | {"allow": null}}
    review_domains: tuple[str, ...] = ()
    transparent_tcp: bool = False
    # Credential masking (`_credentials`): the proxy brokers the child's credentials, with the
    # client's own providers beside the built-in ones.
    credential_masking: bool = False
    credential_providers: tuple[ProviderConfig, ...] = ()

    def patterns(self, permission: str) -> tuple[str, ...]:
        return tuple(pattern for pattern, given in self.domains if given == permission)


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ProxyLaunch(Record):
    """``networkProxy``: how to start the executor-local proxy for one process.
    ``policy_decision_timeout_ms`` set means the client is a decider (it answers
    ``network/policyRequest``)."""

    proxy: ProxyConfig
    audit_metadata: Any = None
    environment_id: str | None = None
    execution_id: str | None = None
    policy_decision_timeout_ms: int | None = None

    @property
    def decider(self) -> bool:
        return self.policy_decision_timeout_ms is not None


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ManagedNetwork(Record):
    """``managedNetwork``: what the sandbox leaves reachable. Every field is optional."""

    loopback_ports: tuple[int, ...] = ()
    allow_local_binding: bool = False
    transparent_tcp: bool = False


# -- domain patterns ----------------------------------------------------------------------------

_BAD_SYNTAX = frozenset("/\\{}")


def _split_prefix(pattern: str) -> tuple[str, str]:
    for prefix in ("**.", "*."):
        if pattern.startswith(prefix):
            return prefix, pattern[len(prefix):]
    return "", pattern


def _valid_brackets(body: str) -> bool:
    if "[" not in body and "]" not in body:
        return True
    if not body.startswith("[") or body.count("[") != 1 or body.count("]") != 1:
        return False
    inner, _, rest = body[1:].partition("]")
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return False
    if inner == "*":
        return True
    try:
        ipaddress.IPv6Address(inner)
    except ValueError:
        return False
    return True


def check_pattern(pattern: str) -> None:
    """Raises the reference's -32602 for a pattern it refuses (checks in its order)."""
    trimmed = pattern.strip()
    prefix, body = _split_prefix(trimmed)
    if not normalize_host(body):
        raise invalid_params(f"{INVALID_CONFIG}domain pattern is empty")
    if any(char in _BAD_SYNTAX or char.isspace() for char in trimmed):
        raise invalid_params(f"{INVALID_CONFIG}unsupported domain pattern syntax: {pattern}")
    if "**" in body:
        raise invalid_params(f"{INVALID_CONFIG}unsupported repeated wildcard: {pattern}")
    if not _valid_brackets(body):
        raise invalid_params(
            f"{INVALID_CONFIG}brackets are only supported for IPv6 literals or [*]: {pattern}")


def normalize_host(host: str) -> str:
    """A host as the policy compares it: trimmed, without brackets or a ``:port``, lower case,
    without trailing dots."""
    host = host.strip()
    if host.startswith("[") and "]" in host:
        host = host[1:host.index("]")]
    elif host.count(":") == 1:
        host = host.split(":")[0]
    return host.lower().rstrip(".")


@attrs.frozen(repr=False, eq=False, slots=False)
class _Pattern(Record):
    kind: Literal["any", "apex_and_subdomains", "subdomains", "exact"]
    domain: str

    @classmethod
    def parse(cls, pattern: str) -> _Pattern:
        prefix, body = _split_prefix(pattern.strip())
        domain = normalize_host(body)
        if domain == "*" and not prefix:
            return cls("any", "")
        kind = {"**.": "apex_and_subdomains", "*.": "subdomains", "": "exact"}[prefix]
        return cls(kind, domain)  # type: ignore[arg-type]

    def matches(self, host: str) -> bool:
        if self.kind == "any":
            return True
        if self.kind != "subdomains" and _glob(self.domain).fullmatch(host):
            return True
        return self.kind != "exact" and bool(_glob("?*." + self.domain).fullmatch(host))


def _glob(pattern: str) -> re.Pattern[str]:
    parts = [".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern]
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def matches(pattern: str, host: str) -> bool:
    """Whether a domain pattern matches a host."""
    return _Pattern.parse(pattern).matches(normalize_host(host))


def _any_match(patterns: tuple[str, ...], host: str) -> bool:
    return any(_Pattern.parse(pattern).matches(host) for pattern in patterns)


# -- addresses ----------------------------------------------------------------------------------

_LOCAL_NETWORKS = tuple(ipaddress.ip_network(net) for net in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
))


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return None


def is_local_address(address: str) -> bool:
    """Loopback, private, link-local, shared (100.64/10), documentation, benchmarking,
    reserved, multicast or unspecified (the IPv4 ranges as measured; the IPv6 ones from the
    reference's sources); an IPv4-mapped IPv6 address counts as its IPv4 one. Not an address:
    False."""
    ip = _ip(address)
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in _LOCAL_NETWORKS)


def _local_literal(host: str) -> bool:
    return host == "localhost" or is_local_address(host)


# -- decisions ----------------------------------------------------------------------------------

@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Question(Record):
    """One connection the proxy was asked for. ``addresses``: what the adapter resolved the host
    to before asking (empty: it did not resolve); for an IP literal, that literal. ``method``:
    the HTTP method (``CONNECT`` for https_connect), None for SOCKS5. ``client``: the child's
    end, ``"127.0.0.1:52216"``."""

    protocol: Protocol
    host: str
    port: int
    method: str | None = None
    client: str = ""
    addresses: tuple[str, ...] = ()


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Verdict(Record):
    """One decision. ``decision`` "ask" means: ask the client (never reported, never final)."""

    decision: Literal["allow", "deny", "ask"]
    reason: str
    source: str = "baseline_policy"  # | "mode_guard" | "decider"
    scope: Literal["domain", "non_domain"] = "domain"
    policy_override: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"


def _deny(reason: str, source: str = "baseline_policy",
          scope: Literal["domain", "non_domain"] = "domain") -> Verdict:
    return Verdict(decision="deny", reason=reason, source=source, scope=scope)


_ALLOWED = Verdict(decision="allow", reason=ALLOW)
_ASK = Verdict(decision="ask", reason=NOT_ALLOWED)


def _early_guard(config: ProxyConfig, question: Question) -> Verdict | None:
    """Limited mode refuses SOCKS5 UDP, and SOCKS5 TCP not bound for HTTPS, unlooked."""
    if config.mode != "limited":
        return None
    if question.protocol == "socks5_udp" or (
            question.protocol == "socks5_tcp" and question.port != HTTPS_PORT):
        return _deny(METHOD_NOT_ALLOWED, "mode_guard", "non_domain")
    return None


def mode_guard(config: ProxyConfig, question: Question) -> Verdict | None:
    """The limited-mode decision after the host was allowed; None when nothing is refused."""
    if config.mode != "limited":
        return None
    if question.protocol == "http":
        if question.method in LIMITED_METHODS:
            return None
        return _deny(METHOD_NOT_ALLOWED, "mode_guard", "non_domain")
    if question.protocol in ("https_connect", "socks5_tcp"):
        return _deny(MITM_REQUIRED, "mode_guard", "non_domain")
    return _deny(METHOD_NOT_ALLOWED, "mode_guard", "non_domain")


def _explicit_local(config: ProxyConfig, host: str) -> bool:
    """An ``allow`` entry without wildcards names this local literal."""
    for pattern in config.patterns("allow"):
        parsed = _Pattern.parse(pattern)
        if parsed.kind == "exact" and "*" not in parsed.domain and "?" not in parsed.domain \
                and parsed.domain == host:
            return True
    return False


def _resolution_refused(config: ProxyConfig, question: Question, host: str) -> bool:
    """The last domain check: without local binding, a host not allowlisted by name as a local
    literal must have resolved, and to public addresses only."""
    if config.allow_local_binding:
        return False
    if _local_literal(host):
        return not _explicit_local(config, host)
    addresses = (host,) if _ip(host) is not None else question.addresses
    return not addresses or any(is_local_address(address) for address in addresses)


def _domain(config: ProxyConfig, question: Question, host: str, decider: bool) -> Verdict:
    if _any_match(config.patterns("deny"), host):
        return _deny(DENIED)
    if (not config.allow_local_binding and _local_literal(host)
            and not _explicit_local(config, host)):
        return _deny(NOT_ALLOWED_LOCAL)
    if not _any_match(config.patterns("allow"), host) or _any_match(config.review_domains, host):
        return _ASK if decider else _deny(NOT_ALLOWED)
    if _resolution_refused(config, question, host):
        return _deny(NOT_ALLOWED_LOCAL)
    return _ALLOWED


def verdicts(config: ProxyConfig, question: Question, decider: bool) -> tuple[Verdict, ...]:
    """Every decision on ``question`` in the order the reference reports them; the last rules.
    ``decider``: the client answers ``network/policyRequest`` (``policyDecisionTimeoutMs`` was
    set). A last verdict "ask" is not reported: ask the client, then `after_decider`."""
    early = _early_guard(config, question)
    if early is not None:
        return (early,)
    first = _domain(config, question, normalize_host(question.host), decider)
    if not first.allowed:
        return (first,)
    guard = mode_guard(config, question)
    return (first,) if guard is None else (first, guard)


def decide(config: ProxyConfig, question: Question, decider: bool) -> Verdict:
    """The ruling decision of the baseline policy ("ask": consult the client)."""
    return verdicts(config, question, decider)[-1]


def decider_verdict(raw_result: Any) -> Verdict:
    """The client's answer to ``network/policyRequest``: the ``result`` of its response, or None
    when it answered with an error or not in time. Anything but a well-formed answer denies.

    ``{"decision": {"type": "allow"}}`` allows (reported with ``policyOverride`` true and reason
    ``not_allowed``, the block it overrode); ``deny`` and ``ask`` refuse, with the answer's
    ``reason`` (absent: ``not_allowed``; empty: ``policy_denied``)."""
    malformed = _deny(NOT_ALLOWED, "decider")
    if not isinstance(raw_result, dict):
        return malformed
    answer = raw_result.get("decision")
    if not isinstance(answer, dict):
        return malformed
    kind = answer.get("type")
    if kind == "allow":
        return Verdict(decision="allow", reason=NOT_ALLOWED, source="decider",
                       policy_override=True)
    if kind not in ("deny", "ask"):
        return malformed
    reason = answer.get("reason")
    if reason is None:
        reason = NOT_ALLOWED
    if not isinstance(reason, str):
        return malformed
    return Verdict(decision=kind, reason=reason or POLICY_DENIED, source="decider")


def after_decider(config: ProxyConfig, question: Question,
                  answer: Verdict) -> tuple[Verdict, ...]:
    """What to report once the client answered (``answer`` from `decider_verdict`); the last
    rules. An allowed host still has to pass the resolution check (an unresolved name or a
    local address: ``not_allowed_local``, reported instead of the allow) and the mode guard."""
    if not answer.allowed:
        return (answer,)
    if _resolution_refused(config, question, normalize_host(question.host)):
        return (_deny(NOT_ALLOWED_LOCAL),)
    guard = mode_guard(config, question)
    return (answer,) if guard is None else (answer, guard)


# -- what goes to the client --------------------------------------------------------------------

def policy_request(process_id: str, question: Question) -> dict[str, Any]:
    """Params of the server-to-client request ``network/policyRequest``."""
    return {"processId": process_id, "request": {
        "protocol": question.protocol, "host": normalize_host(question.host),
        "port": question.port}}


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day counted from 1970-01-01, proleptic Gregorian."""
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524
                   - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def timestamp(wall_time: float) -> str:
    """Seconds since the epoch as the reference writes them: ``2026-12-04T05:42:53.633Z``."""
    millis = round(wall_time * 1_000_000) // 1000
    seconds, milli = divmod(millis, 1000)
    days, second_of_day = divmod(seconds, 86400)
    year, month, day = _civil(days)
    hour, rest = divmod(second_of_day, 3600)
    minute, second = divmod(rest, 60)
    return (f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
            f".{milli:03d}Z")


def decision_notification(process_id: str, wall_time: float, question: Question,
                          verdict: Verdict) -> dict[str, Any]:
    """Params of the ``network/policyDecision`` notification (``method`` only when there is
    one: SOCKS5 has none)."""
    params: dict[str, Any] = {
        "processId": process_id,
        "timestamp": timestamp(wall_time),
        "scope": verdict.scope,
        "decision": verdict.decision,
        "source": verdict.source,
        "reason": verdict.reason,
        "protocol": question.protocol,
        "host": normalize_host(question.host),
        "port": question.port,
    }
    if question.method is not None:
        params["method"] = question.method
    params["client"] = question.client
    params["policyOverride"] = verdict.policy_override
    return params


_HEADERS = {
    NOT_ALLOWED: "blocked-by-allowlist",
    NOT_ALLOWED_LOCAL: "blocked-by-allowlist",
    DENIED: "blocked-by-denylist",
    METHOD_NOT_ALLOWED: "blocked-by-method-policy",
    MITM_REQUIRED: "blocked-by-mitm-required",
}
_MESSAGES = {
    NOT_ALLOWED: "Domain not in allowlist.",
    NOT_ALLOWED_LOCAL: "Sandbox policy blocks local/private network addresses.",
    DENIED: "Domain denied by the sandbox policy.",
    METHOD_NOT_ALLOWED: "Method not allowed in limited mode.",
    MITM_REQUIRED: "MITM required for limited HTTPS.",
}
OTHER_HEADER = "blocked-by-policy"
OTHER_MESSAGE = "Request blocked by network policy."


def refusal_message(reason: str) -> str:
    return _MESSAGES.get(reason, OTHER_MESSAGE)


def refusal(question: Question, verdict: Verdict) -> tuple[int, list[tuple[str, str]], bytes]:
    """The 403 a refused HTTP client gets: status, headers, body. A proxied request gets a JSON
    body; a refused CONNECT gets the message alone, as text. The adapter adds the framing
    headers (content-length, connection, date)."""
    if question.protocol not in ("http", "https_connect"):
        raise ValueError(f"a {question.protocol} refusal is a SOCKS5 reply, not HTTP")
    header = _HEADERS.get(verdict.reason, OTHER_HEADER)
    message = refusal_message(verdict.reason)
    if question.protocol == "https_connect":
        return 403, [("content-type", "text/plain"), ("x-proxy-error", header)], \
            message.encode()
    body = {
        "status": "blocked",
        "host": normalize_host(question.host),
        "reason": verdict.reason,
        "decision": verdict.decision,
        "source": verdict.source,
        "protocol": question.protocol,
        "port": question.port,
        "message": message,
    }
    encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    return 403, [("content-type", "application/json"), ("x-proxy-error", header)], encoded


SOCKS_SUCCEEDED = 0x00
SOCKS_NOT_ALLOWED = 0x02  # "connection not allowed by ruleset"


def socks_reply_code(verdict: Verdict) -> int:
    """The SOCKS5 reply for a decision: every refusal is 0x02."""
    return SOCKS_SUCCEEDED if verdict.allowed else SOCKS_NOT_ALLOWED


# -- the child's environment --------------------------------------------------------------------

_HTTP_VARIABLES = (
    "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
    "WS_PROXY", "WSS_PROXY", "ws_proxy", "wss_proxy",
    "YARN_HTTP_PROXY", "YARN_HTTPS_PROXY",
    "NPM_CONFIG_PROXY", "NPM_CONFIG_HTTP_PROXY", "NPM_CONFIG_HTTPS_PROXY",
    "npm_config_proxy", "npm_config_http_proxy", "npm_config_https_proxy",
    "PIP_PROXY", "DOCKER_HTTP_PROXY", "DOCKER_HTTPS_PROXY",
    "BUNDLE_HTTP_PROXY", "BUNDLE_HTTPS_PROXY",
)
_SOCKS_VARIABLES = ("ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy")
_NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy", "BUNDLE_NO_PROXY", "NPM_CONFIG_NOPROXY",
                       "npm_config_noproxy")


def proxy_env(config: ProxyConfig, http_port: int, socks_port: int | None) -> dict[str, str]:
    """The variables the reference sets in the child (over what it would have had). Without a
    SOCKS5 listener (``socks_port`` None) the SOCKS variables point at the HTTP proxy."""
    http = f"http://127.0.0.1:{http_port}"
    socks = http if socks_port is None else f"socks5h://127.0.0.1:{socks_port}"
    no_proxy = LOCAL_NO_PROXY if config.allow_local_binding else ""
    env = dict.fromkeys(_HTTP_VARIABLES, http)
    env.update(dict.fromkeys(_SOCKS_VARIABLES, socks))
    env.update(dict.fromkeys(_NO_PROXY_VARIABLES, no_proxy))
    env["CODEX_NETWORK_PROXY_ACTIVE"] = "1"
    env["CODEX_NETWORK_ALLOW_LOCAL_BINDING"] = "1" if config.allow_local_binding else "0"
    env["NODE_USE_ENV_PROXY"] = "1"
    env["ELECTRON_GET_USE_PROXY"] = "true"
    return env


__all__ = [
    "ManagedNetwork", "ProxyConfig", "ProxyLaunch", "Question", "Verdict",
    "after_decider", "check_pattern", "decide", "decider_verdict", "decision_notification",
    "is_local_address", "matches", "mode_guard", "normalize_host",
    "policy_request", "proxy_env", "refusal", "socks_reply_code", "timestamp",
    "verdicts",
]
