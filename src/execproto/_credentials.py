"""Credential masking, with no I/O: which of a child's variables hold credentials, the
same-shape dummies it sees instead, and where the proxy may put the real value back.

With ``proxy.credentialMasking`` the managed proxy becomes a credential broker. In order:

1. `active_providers(config, env)` gives the providers that apply: the built-in ones (GitHub
   tokens, bound to github.com, api.github.com and ``*.ghe.com``; GitHub Enterprise tokens,
   bound to ``$GH_HOST``; ``OPENAI_API_KEY``, bound to api.openai.com) and the client's own
   (``credentialProviders``), each checked; one that fails a check is dropped, with the
   reference's log line (`Dropped`).
2. `mask_environment(argv, env, providers, dummy)` replaces each credential in the child's
   environment with a dummy, only for a ``bash -c SCRIPT`` command (what the reference masks:
   ``sh -c``, ``bash -lc`` and direct programs keep their values), and adds
   ``CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE`` and the JSON list
   ``CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS``. ``dummy`` makes a dummy: the adapter passes one
   that draws randomness (`dummy_value` given random bytes) and remembers what it gave, so one
   value keeps one dummy for the server's life, as the reference's does.
3. For each request the proxy forwards, `substitute(credentials, scheme, host, port, path,
   headers)` swaps a dummy back for the real value, in the credential's own header, and only
   toward a destination the credential is bound to; `intercepts(credentials, host, port)` says
   which CONNECT tunnels the proxy must open (TLS, with a certificate of its own CA) to do it.

Measured on the reference (codex 0.171 exec-server over its websocket): the variables, the
CA variables (set for every command of a masking proxy, masked or not), the dummies' shapes
(prefix, ``masked``, letters and digits to the real value's length or the provider's
minimum; a custom provider's dummy keeps the pattern's literal prefix), the marker's shape and
order, a value trimmed first, ``GH_ENTERPRISE_TOKEN`` left alone without ``GH_HOST``, a custom
pattern matching the whole value or not at all, and every drop reason but the header one,
whose text the reference's log cut short. From its sources (an older version): a dummy in the
``Authorization`` header is swapped only when exactly one credential claims it.

Not followed: the reference generates a custom provider's dummy from the pattern itself (any
string it matches); here it is the real value with its characters redrawn within their class
(digit, hex letter, letter of the same case), kept only if a pattern matches it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Literal
from urllib.parse import urlsplit

import attrs

from ._netproxy import Auth, ProviderConfig, normalize_host
from ._records import Record

AUTHS: tuple[Auth, ...] = ("bearer", "token", "basic", "header")

BROKER_ACTIVE = "CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE"
BROKERED = "CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS"
ALIAS = "@alias:"
GH_HOST = "GH_HOST"
# The variables that point the child's TLS clients at the proxy's CA bundle (the reference's
# set: every language's and tool's own name for it).
CA_VARIABLES = (
    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO", "CARGO_HTTP_CAINFO", "PIP_CERT", "NPM_CONFIG_CAFILE", "npm_config_cafile",
    "BUNDLE_SSL_CA_CERT", "DENO_CERT", "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
    "CODEX_CA_CERTIFICATE",
)
UNPROTECTED = ("Credential masking could not protect some environment credentials; "
               "continuing with those values unmasked.")
MARKER = "masked"
DUMMY_TRIES = 8  # draws for a custom dummy that its pattern matches and that differs
MAX_VALUE = 4096  # a longer value is no credential we mask (and no header we would send)

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_ALPHANUMERIC = _LETTERS + _LETTERS.upper() + "0123456789"


# -- destinations -------------------------------------------------------------------------------

@attrs.frozen(repr=False, eq=False, slots=False)
class Destination(Record):
    """Where a credential may go: a scheme, a host (or its subdomains), a port and a path
    prefix. HTTPS unless the host is loopback (then plain HTTP may be named)."""

    scheme: Literal["http", "https"]
    host: str
    wildcard: bool  # subdomains of ``host``, not ``host`` itself
    port: int
    path_prefix: str = "/"

    @classmethod
    def parse(cls, text: str) -> Destination:
        """A ``url_prefixes`` entry; ValueError if the reference would refuse it."""
        text = text.strip()
        scheme, found, rest = text.partition("://")
        if not found:
            scheme, rest = "", text
        wildcard = rest.startswith("*.")
        if wildcard:
            rest = "wildcard." + rest[2:]
        parts = urlsplit("https://" + rest)
        if parts.username is not None or parts.password is not None or parts.query \
                or parts.fragment or "?" in rest or "#" in rest:
            raise ValueError("credential destination cannot include user information, a "
                             "query, or a fragment")
        host = parts.hostname or ""
        if wildcard:
            host = host[len("wildcard."):]
        host = normalize_host(host)
        if not host or "*" in host or "/" in host:
            raise ValueError("credential destination must have an exact hostname or scoped "
                             "wildcard")
        loopback = not wildcard and _loopback(host)
        if scheme == "" or scheme.lower() == "https":
            chosen: Literal["http", "https"] = "http" if loopback and not scheme else "https"
        elif scheme.lower() == "http" and loopback:
            chosen = "http"
        else:
            raise ValueError("credential destination must use HTTPS unless it targets "
                             "loopback over HTTP")
        port = parts.port or (443 if chosen == "https" else 80)
        return cls(chosen, host, wildcard, port, parts.path or "/")

    def matches_host(self, host: str, port: int) -> bool:
        if port != self.port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def matches(self, scheme: str, host: str, port: int, path: str) -> bool:
        """A request to ``scheme://host:port/path`` (host normalized) goes here."""
        if scheme != self.scheme or not self.matches_host(host, port) or not _safe_path(path):
            return False
        prefix = self.path_prefix
        return (prefix == "/" or path == prefix
                or (path.startswith(prefix) and (prefix.endswith("/") or path[len(prefix)] == "/")))


def _loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.") or host in ("::1", "[::1]")


def _safe_path(path: str) -> bool:
    """A path a credential may be sent with: absolute, and without encoded or literal dot
    segments or separators that an origin could read as another path."""
    lowered = path.split("?", 1)[0].lower()
    if not lowered.startswith("/") or "%2f" in lowered or "%5c" in lowered or "\\" in lowered:
        return False
    segments = lowered.split("/")
    return not any(segment in (".", "..", "%2e", "%2e%2e", ".%2e", "%2e.") for segment in segments)


def _github_cloud(host: str) -> bool:
    return host in ("github.com", "api.github.com") or host.endswith(".ghe.com")


_GITHUB_CLOUD = (Destination("https", "github.com", False, 443),
                 Destination("https", "api.github.com", False, 443),
                 Destination("https", "ghe.com", True, 443))
_OPENAI = (Destination("https", "api.openai.com", False, 443),)


# -- providers ------------------------------------------------------------------------------------

Kind = Literal["github", "openai", "custom"]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Provider(Record):
    """A provider that applies: its variables, how its dummies look, where its credentials may
    go and in which headers they travel."""

    name: str
    kind: Kind
    env: tuple[str, ...]
    destinations: tuple[Destination, ...]
    auth: tuple[Auth, ...] = ("bearer",)
    patterns: tuple[str, ...] = ()  # custom: regular expressions the whole value must match
    header: str | None = None
    prefix: str = ""

    def accepts(self, value: str) -> bool:
        """Whether ``value`` is a credential of this provider's (one it can mask)."""
        if not value or len(value) > MAX_VALUE or not _header_safe(value):
            return False
        if self.kind != "custom":
            return True
        return any(re.fullmatch(pattern, value) for pattern in self.patterns)


@attrs.frozen(repr=False, eq=False, slots=False)
class Dropped(Record):
    """A custom provider that failed its checks: the reference's log line, without values."""

    name: str
    error: str

    @property
    def message(self) -> str:
        return f"ignoring invalid credential provider provider={self.name} error={self.error}"


_BUILTIN_ENV = {
    "github": ("GH_TOKEN", "GITHUB_TOKEN"),
    "github_enterprise": ("GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN"),
    "openai": ("OPENAI_API_KEY",),
}
BUILTIN_VARIABLES = frozenset(name for names in _BUILTIN_ENV.values() for name in names)


def _builtins(env: Mapping[str, str]) -> list[Provider]:
    found = [Provider(name="github", kind="github", env=_BUILTIN_ENV["github"],
                      destinations=_GITHUB_CLOUD)]
    hinted = normalize_host(env.get(GH_HOST, ""))
    if hinted and not _github_cloud(hinted):
        found.append(Provider(name="github_enterprise", kind="github",
                              env=_BUILTIN_ENV["github_enterprise"],
                              destinations=(Destination("https", hinted, False, 443),)))
    found.append(Provider(name="openai", kind="openai", env=_BUILTIN_ENV["openai"],
                          destinations=_OPENAI))
    return found


def _custom(config: ProviderConfig, env: Mapping[str, str]) -> Provider | Dropped | None:
    """A checked custom provider; `Dropped` with the reason; None when it names its destination
    by a variable the environment lacks (its values then stay unmasked)."""
    name = config.name

    def dropped(error: str) -> Dropped:
        return Dropped(name, error)

    if not name:
        return dropped("credential provider name must not be empty")
    if not config.env:
        return dropped(f"credential provider `{name}` has no environment keys")
    if any(variable in BUILTIN_VARIABLES for variable in config.env):
        return dropped(f"credential provider `{name}` overlaps a built-in credential source")
    if not config.patterns:
        return dropped(f"credential provider `{name}` has no credential patterns")
    for pattern in config.patterns:
        try:
            compiled = re.compile(pattern)
        except (re.error, RecursionError, OverflowError):
            return dropped(f"invalid credential pattern for provider `{name}`")
        if compiled.fullmatch(""):
            return dropped(f"invalid credential pattern for provider `{name}`")
    auth = config.auth or ("bearer",)
    if ("header" in auth) != bool(config.header):
        return dropped(f"credential provider `{name}` requires a header name exactly when "
                       "using header authentication")
    if config.header is not None and not _token(config.header):
        return dropped(f"invalid header for credential provider `{name}`")
    prefixes = list(config.url_prefixes)
    if config.url_prefix_from_env is not None:
        value = env.get(config.url_prefix_from_env, "").strip()
        if not value:
            return None
        prefixes.append(value)
    if not prefixes:
        return dropped(f"credential provider `{name}` has no destination URL prefixes")
    try:
        destinations = tuple(Destination.parse(prefix) for prefix in prefixes)
    except ValueError:
        return dropped(f"invalid destination for credential provider `{name}`")
    return Provider(name=name, kind="custom", env=config.env, destinations=destinations,
                    auth=auth, patterns=config.patterns, header=config.header,
                    prefix=config.prefix or "")


def active_providers(configs: Iterable[ProviderConfig], env: Mapping[str, str],
                     ) -> tuple[tuple[Provider, ...], tuple[Dropped, ...], bool]:
    """The providers that apply to a child whose environment is ``env``: the built-in ones,
    then the client's that pass their checks. Also the dropped ones, and whether a custom
    provider's variable is set while the provider cannot apply (its value stays unmasked)."""
    providers = _builtins(env)
    dropped: list[Dropped] = []
    inactive = False
    for config in configs:
        checked = _custom(config, env)
        if isinstance(checked, Provider):
            providers.append(checked)
        else:
            if isinstance(checked, Dropped):
                dropped.append(checked)
            inactive = inactive or any(env.get(name, "").strip() for name in config.env)
    return tuple(providers), tuple(dropped), inactive


# -- dummies --------------------------------------------------------------------------------------

_GITHUB_PREFIXES = ("github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_")
_MINIMUM = {"github": 40, "openai": 51}


def _builtin_prefix(kind: Kind, value: str) -> str:
    if kind == "github":
        return next((p for p in _GITHUB_PREFIXES if value.startswith(p)), "ghp_")
    if not value.startswith("sk-"):
        return "sk-"
    dash = value.find("-", 3)
    return value[:dash + 1] if dash != -1 else "sk-"


def _pick(alphabet: str, byte: int) -> str:
    return alphabet[byte % len(alphabet)]


def _literal_prefix(pattern: str) -> str:
    """The characters every match of ``pattern`` begins with, as far as they are plain."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    literal: list[str] = []
    for index, char in enumerate(body):
        if char in ".^$*+?{}[]\\|()":
            if char in "*?{" and literal:
                literal.pop()  # the last one may repeat, or be absent
            break
        if index + 1 < len(body) and body[index + 1] in "*?{":
            break
        literal.append(char)
    return "".join(literal)


def _redrawn(char: str, byte: int) -> str:
    """``char`` drawn again within its class: a digit, a hex letter, a letter of its case."""
    for alphabet in ("0123456789", "abcdef", "ABCDEF", _LETTERS, _LETTERS.upper()):
        if char in alphabet:
            return _pick(alphabet, byte)
    return char


def dummy_value(provider: Provider, real: str, draw: Callable[[int], bytes]) -> str | None:
    """A dummy of ``real``'s shape for ``provider`` (``draw(n)``: n random bytes), or None if
    none can be made (a custom pattern that no redrawn value matches)."""
    if provider.kind != "custom":
        prefix = _builtin_prefix(provider.kind, real) + MARKER
        length = max(len(real), _MINIMUM[provider.kind], len(prefix) + 16)
        return prefix + "".join(_pick(_ALPHANUMERIC, byte) for byte in draw(length - len(prefix)))
    kept = max((len(p) for p in map(_literal_prefix, provider.patterns) if real.startswith(p)),
               default=0)
    for _ in range(DUMMY_TRIES):
        rest = real[kept:]
        drawn = real[:kept] + "".join(
            _redrawn(char, byte) for char, byte in zip(rest, draw(len(rest)), strict=True))
        if drawn != real and any(re.fullmatch(p, drawn) for p in provider.patterns):
            return drawn
    return None


# -- the child's environment ----------------------------------------------------------------------

@attrs.frozen(repr=False, eq=False, slots=False)
class Brokered(Record):
    """One masked variable: the child sees ``dummy``; the proxy may send ``real`` in its
    place, toward the provider's destinations only. ``real`` never leaves the server."""

    variable: str
    provider: Provider
    real: str = attrs.field(repr=False)
    dummy: str


@attrs.frozen(repr=False, eq=False, slots=False)
class Masking(Record):
    env: dict[str, str]
    credentials: tuple[Brokered, ...]
    unprotected: bool  # a credential stays unmasked: the reference warns (`UNPROTECTED`)


def masks_command(argv: tuple[str, ...] | list[str]) -> bool:
    """Whether the reference masks this command's environment: ``bash -c SCRIPT``, exactly."""
    return len(argv) == 3 and argv[0].rsplit("/", 1)[-1] == "bash" and argv[1] == "-c"


Dummy = Callable[[Provider, str, str], "str | None"]  # (provider, variable, real) -> dummy


def mask_environment(argv: tuple[str, ...] | list[str], env: Mapping[str, str],
                     providers: tuple[Provider, ...], dummy: Dummy,
                     inactive: bool = False) -> Masking:
    """The child's environment with its credentials masked (`masks_command` commands only),
    the broker's variables added, and what was masked. ``inactive``: a custom provider's
    variable is set where it cannot apply (from `active_providers`)."""
    child = dict(env)
    if not masks_command(argv):
        child.pop(BROKER_ACTIVE, None)
        child.pop(BROKERED, None)
        return Masking(child, (), False)
    child[BROKER_ACTIVE] = "1"
    masked: list[Brokered] = []
    dummies: set[str] = set()
    unprotected = inactive
    for provider in providers:
        for variable in provider.env:
            value = child.get(variable)
            if value is None or not value.strip() or value.strip() in dummies:
                continue
            real = value.strip()
            made = dummy(provider, variable, real) if provider.accepts(real) else None
            if made is None:
                unprotected = True
                continue
            child[variable] = made
            dummies.add(made)
            masked.append(Brokered(variable, provider, real, made))
    pairs = sorted([(ALIAS + b.variable, b.dummy) for b in masked]
                   + [(b.variable, b.dummy) for b in masked])
    child[BROKERED] = json.dumps(pairs, separators=(",", ":"))
    return Masking(child, tuple(masked), unprotected)


def ca_env(bundle: str) -> dict[str, str]:
    """The variables that make the child trust the proxy's CA (``bundle``: the system's roots
    and the CA, in one PEM file)."""
    return dict.fromkeys(CA_VARIABLES, bundle)


# -- requests -------------------------------------------------------------------------------------

def intercepts(credentials: Iterable[Brokered], host: str, port: int) -> bool:
    """Whether a CONNECT to ``host:port`` must be opened (TLS terminated by the proxy) for a
    credential bound there to be put back."""
    host = normalize_host(host)
    return any(d.scheme == "https" and d.matches_host(host, port)
               for b in credentials for d in b.provider.destinations)


def _token(name: str) -> bool:
    return bool(re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", name))


def _header_safe(value: str) -> bool:
    return all(" " <= char <= "~" or char == "\t" for char in value)


def _basic(value: str, dummy: str, real: str) -> str | None:
    scheme, _, encoded = value.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(":")
    if not colon or dummy not in (user, password):
        return None
    user = real if user == dummy else user
    password = real if password == dummy else password
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _scheme_value(value: str, scheme: str, dummy: str, real: str) -> str | None:
    given, _, rest = value.partition(" ")
    if given.lower() == scheme and rest.strip() == dummy:
        return f"{given} {real}"
    return None


def _translate(brokered: Brokered, name: str, value: str) -> str | None:
    """The header's value with ``brokered``'s real value in place of its dummy, if the header is
    one its provider sends it in (and the dummy is there); else None."""
    provider, dummy, real = brokered.provider, brokered.dummy, brokered.real
    lowered = name.lower()
    if provider.kind != "custom":
        if lowered != "authorization":
            return None
        basic = _basic(value, dummy, real)
        if basic is not None:
            return basic
        return value.replace(dummy, real) if dummy in value else None
    for auth in provider.auth:
        if auth == "header":
            if provider.header is not None and lowered == provider.header.lower() \
                    and value == provider.prefix + dummy:
                return provider.prefix + real
            continue
        if lowered != "authorization":
            continue
        made = (_basic(value, dummy, real) if auth == "basic"
                else _scheme_value(value, auth, dummy, real))
        if made is not None:
            return made
    return None


def substitute(credentials: Iterable[Brokered], scheme: str, host: str, port: int, path: str,
               headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` of a request to ``scheme://host:port`` + ``path`` with each dummy put back
    to its real value, where its credential is bound to that destination. A header that two
    credentials would translate differently is left as it is (the reference's rule: no guess
    which one the child meant)."""
    host = normalize_host(host)
    bound = [b for b in credentials
             if any(d.matches(scheme, host, port, path) for d in b.provider.destinations)]
    if not bound:
        return headers
    result = []
    for name, value in headers:
        made = {made for b in bound if (made := _translate(b, name, value)) is not None}
        result.append((name, made.pop() if len(made) == 1 else value))
    return result


def contains_dummy(credentials: Iterable[Brokered], headers: list[tuple[str, str]]) -> bool:
    """Whether any header carries a dummy (for the adapter's count of dummies left alone)."""
    return any(b.dummy in value for b in credentials for _, value in headers)


__all__ = [
    "AUTHS", "BROKERED", "BROKER_ACTIVE", "CA_VARIABLES", "UNPROTECTED",
    "Brokered", "Destination", "Dropped", "Masking", "Provider", "ProviderConfig",
    "active_providers", "ca_env", "contains_dummy", "dummy_value", "intercepts",
    "mask_environment", "masks_command", "substitute",
]
