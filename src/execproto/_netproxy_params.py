"""Reading ``networkProxy`` and ``managedNetwork`` of `process/start`, in the reference's
deserializer's words (`_netproxy` holds what they mean, and every decision made by them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._credentials import AUTHS, ProviderConfig
from ._errors import invalid_params
from ._fields import wrong_type
from ._jsonrpc import describe
from ._netproxy import (
    DISABLED,
    INVALID_CONFIG,
    TRANSPARENT_TCP_SANDBOX,
    ZERO_TIMEOUT,
    ManagedNetwork,
    ProxyConfig,
    ProxyLaunch,
    check_pattern,
)

_AUDIT_FIELDS = ("conversationId", "appVersion", "userAccountId", "authMode", "originator",
                 "userEmail", "terminalType", "model", "slug")
_MAX_PORT = 65535
_MAX_UINT = 2**64 - 1

# -- reading params ------------------------------------

def _unexpected(value: Any) -> str:
    """How serde names a value it read through a buffered (untagged) path: numbers precisely."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return describe(value)
    if isinstance(value, int):
        return f"integer `{value}`"
    return f"floating point `{value!r}`"


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise wrong_type(value, "a boolean")
    return value


def _precise_flag(value: Any) -> bool:
    """A boolean whose wrong value is named as the reference names it here (``integer `1```)."""
    if not isinstance(value, bool):
        raise invalid_params(f"invalid type: {_unexpected(value)}, expected a boolean")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise wrong_type(value, "a string")
    return value


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise wrong_type(value, "a sequence")
    return tuple(_text(item) for item in value)


def _u64(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong_type(value, "u64")
    if isinstance(value, float) or not 0 <= value <= _MAX_UINT:
        raise invalid_params("invalid number")
    return value


def _u16(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong_type(value, "u16")
    if isinstance(value, float) or not 0 <= value <= _MAX_PORT:
        raise invalid_params("invalid number")
    return value


def _expected(variants: tuple[str, ...]) -> str:
    named = [f"`{variant}`" for variant in variants]
    if len(named) == 2:
        return f"{named[0]} or {named[1]}"
    return "one of " + ", ".join(named)


def _unit_enum(variants: tuple[str, ...], describe_value: Callable[[Any], str]) -> Any:
    """A serde enum of unit variants: ``"name"`` or ``{"name": null}``."""

    def convert(value: Any) -> str:
        if isinstance(value, dict):
            if len(value) != 1:
                raise invalid_params("invalid value: map, expected map with a single key")
            ((name, inner),) = value.items()
        elif isinstance(value, str):
            name, inner = value, None
        else:
            raise invalid_params(f"invalid type: {describe_value(value)}, expected string or map")
        if name not in variants:
            raise invalid_params(f"unknown variant `{name}`, expected {_expected(variants)}")
        if inner is not None:
            raise invalid_params(f"invalid type: {describe_value(inner)}, expected unit")
        return str(name)

    return convert


_mode = _unit_enum(("limited", "full"), describe)
_permission = _unit_enum(("none", "allow", "deny"), describe)
_socket_permission = _unit_enum(("allow", "deny"), _unexpected)


def _struct(value: Any, struct: str, fields: dict[str, Callable[[Any], Any]],
            required: tuple[str, ...] = (), nullable: tuple[str, ...] = ()) -> dict[str, Any]:
    """Reads a JSON object as serde reads a struct: fields in the order they came (the first bad
    one is the error), unknown ones ignored, then the first missing required one. A field in
    ``nullable`` (an ``Option``) takes null as absent."""
    if not isinstance(value, dict):
        raise wrong_type(value, f"struct {struct}")
    read: dict[str, Any] = {}
    for name, item in value.items():
        convert = fields.get(name)
        if convert is None:
            continue
        read[name] = None if item is None and name in nullable else convert(item)
    for name in required:
        if name not in read:
            raise invalid_params(f"missing field `{name}`")
    return read


def _domains(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise wrong_type(value, "a map")
    return tuple(sorted((pattern, _permission(given)) for pattern, given in value.items()))


def _unix_sockets(value: Any) -> Any:
    if not isinstance(value, dict):
        raise wrong_type(value, "struct NetworkUnixSocketPermissions")
    for given in value.values():
        _socket_permission(given)
    return value


def _audit_metadata(value: Any) -> Any:
    def optional_text(item: Any) -> str | None:
        return None if item is None else _text(item)

    if isinstance(value, list):
        for item in value[:len(_AUDIT_FIELDS)]:
            optional_text(item)
        if len(value) < len(_AUDIT_FIELDS):
            raise invalid_params(f"invalid length {len(value)}, expected struct "
                                 f"NetworkProxyAuditMetadata with {len(_AUDIT_FIELDS)} elements")
        if len(value) > len(_AUDIT_FIELDS):
            raise invalid_params(f"invalid length {len(value)}, expected fewer elements in array")
        return value
    _struct(value, "NetworkProxyAuditMetadata", dict.fromkeys(_AUDIT_FIELDS, optional_text))
    return value


_auth = _unit_enum(AUTHS, describe)
_PROVIDER_FIELDS: dict[str, Callable[[Any], Any]] = {
    "env": _texts,
    "patterns": _texts,
    "url_prefixes": _texts,
    "url_prefix_from_env": _text,
    "auth": lambda value: tuple(_auth(item) for item in _sequence(value)),
    "header": _text,
    "prefix": _text,
}
_PROVIDER_OPTIONAL = ("url_prefix_from_env", "header", "prefix")


def _sequence(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise wrong_type(value, "a sequence")
    return value


def _provider(name: str, value: Any) -> ProviderConfig:
    """One ``credentialProviders`` entry: serde's struct with unknown fields refused (the
    first, in the order sent), every field optional; an array is read field by field."""
    if isinstance(value, list):
        fields = list(_PROVIDER_FIELDS)
        if len(value) > len(fields):
            raise invalid_params(f"invalid length {len(value)}, expected fewer elements in array")
        value = dict(zip(fields, value, strict=False))
    elif not isinstance(value, dict):
        raise wrong_type(value, "struct CredentialProviderConfig")
    read: dict[str, Any] = {}
    for field, item in value.items():
        convert = _PROVIDER_FIELDS.get(field)
        if convert is None:
            expected = ", ".join(f"`{known}`" for known in _PROVIDER_FIELDS)
            raise invalid_params(f"unknown field `{field}`, expected one of {expected}")
        read[field] = None if item is None and field in _PROVIDER_OPTIONAL else convert(item)
    return ProviderConfig(name=name, **read)


def _providers(value: Any) -> tuple[ProviderConfig, ...]:
    """``credentialProviders``: a map from a provider's name to its config (null refused)."""
    if not isinstance(value, dict):
        raise wrong_type(value, "a map")
    return tuple(_provider(name, item) for name, item in value.items())


_PROXY_FIELDS: dict[str, Callable[[Any], Any]] = {
    "enabled": _flag,
    "enableSocks5": _flag,
    "enableSocks5Udp": _flag,
    "allowUpstreamProxy": _flag,
    "dangerouslyAllowAllUnixSockets": _flag,
    "mode": _mode,
    "domains": _domains,
    "unixSockets": _unix_sockets,
    "allowLocalBinding": _flag,
    "reviewDomains": _texts,
    "transparentTcp": _flag,
    "credentialMasking": _precise_flag,
    "credentialProviders": _providers,
}
_PROXY_REQUIRED = ("enabled", "enableSocks5", "enableSocks5Udp", "allowUpstreamProxy",
                   "dangerouslyAllowAllUnixSockets", "mode", "allowLocalBinding")


def _proxy(value: Any) -> ProxyConfig:
    read = _struct(value, "RemoteNetworkProxyConfig", _PROXY_FIELDS, _PROXY_REQUIRED,
                   nullable=("domains", "unixSockets"))
    return ProxyConfig(
        enabled=read["enabled"],
        enable_socks5=read["enableSocks5"],
        enable_socks5_udp=read["enableSocks5Udp"],
        allow_upstream_proxy=read["allowUpstreamProxy"],
        dangerously_allow_all_unix_sockets=read["dangerouslyAllowAllUnixSockets"],
        mode=read["mode"],
        allow_local_binding=read["allowLocalBinding"],
        domains=read.get("domains") or (),
        unix_sockets=read.get("unixSockets"),
        review_domains=read.get("reviewDomains", ()),
        transparent_tcp=read.get("transparentTcp", False),
        credential_masking=read.get("credentialMasking", False),
        credential_providers=read.get("credentialProviders", ()),
    )


_LAUNCH_FIELDS: dict[str, Callable[[Any], Any]] = {
    "proxy": _proxy,
    "auditMetadata": _audit_metadata,
    "environmentId": _text,
    "executionId": _text,
    "policyDecisionTimeoutMs": _u64,
}


def parse_launch(raw: Any, *, managed_linux_sandbox: bool = False) -> ProxyLaunch:
    """``networkProxy`` of `process/start`, checked as the reference checks it: the shape
    first, then a zero timeout, transparent TCP without a managed Linux sandbox (the caller
    says whether the process gets one), a disabled proxy, unix socket paths, and the domain
    patterns (``domains`` in sorted order, then ``reviewDomains``). Raises `RpcError`."""
    read = _struct(raw, "RemoteNetworkProxyLaunchConfig", _LAUNCH_FIELDS, ("proxy",),
                   nullable=("environmentId", "executionId", "policyDecisionTimeoutMs"))
    launch = ProxyLaunch(
        proxy=read["proxy"],
        audit_metadata=read.get("auditMetadata"),
        environment_id=read.get("environmentId"),
        execution_id=read.get("executionId"),
        policy_decision_timeout_ms=read.get("policyDecisionTimeoutMs"),
    )
    config = launch.proxy
    if launch.policy_decision_timeout_ms == 0:
        raise invalid_params(ZERO_TIMEOUT)
    if config.transparent_tcp and not managed_linux_sandbox:
        raise invalid_params(TRANSPARENT_TCP_SANDBOX)
    if not config.enabled:
        raise invalid_params(DISABLED)
    _check_unix_sockets(config.unix_sockets)
    for pattern, permission in config.domains:
        if permission != "none":
            check_pattern(pattern)
    for pattern in config.review_domains:
        check_pattern(pattern)
    return launch


def parse_managed(raw: Any) -> ManagedNetwork | None:
    """``managedNetwork`` of `process/start` (null or absent: None). Its ``transparentTcp``
    needs a ``networkProxy`` too: the caller answers `MANAGED_TRANSPARENT_TCP` without one."""
    if raw is None:
        return None

    def ports(value: Any) -> tuple[int, ...]:
        if not isinstance(value, list):
            raise wrong_type(value, "a sequence")
        return tuple(_u16(item) for item in value)

    read = _struct(raw, "ManagedNetworkSandboxContext",
                   {"loopbackPorts": ports, "allowLocalBinding": _flag, "transparentTcp": _flag})
    return ManagedNetwork(
        loopback_ports=read.get("loopbackPorts") or (),
        allow_local_binding=bool(read.get("allowLocalBinding")),
        transparent_tcp=bool(read.get("transparentTcp")),
    )


def _rust_debug(text: str) -> str:
    """A string as Rust's ``{:?}`` shows it."""
    escapes = {"\\": "\\\\", '"': '\\"', "\t": "\\t", "\r": "\\r", "\n": "\\n", "\0": "\\0"}
    shown = []
    for char in text:
        if char in escapes:
            shown.append(escapes[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            shown.append(f"\\u{{{ord(char):x}}}")
        else:
            shown.append(char)
    return '"' + "".join(shown) + '"'


def _check_unix_sockets(sockets: Any) -> None:
    if not sockets:
        return
    allowed = [path for path in sorted(sockets)
               if _socket_permission(sockets[path]) == "allow"]
    for index, path in enumerate(allowed):
        if not path.startswith("/") or "\0" in path:
            raise invalid_params(
                f"{INVALID_CONFIG}invalid network.allow_unix_sockets[{index}]: expected a "
                f"NUL-free absolute path for Linux, got {_rust_debug(path)}")


