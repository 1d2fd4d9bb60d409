"""Credential masking at a spawn: the child's environment as the core's rules mask it
(`execproto.netproxy.mask_environment`), with this server's randomness and CA.

A real value keeps one dummy for the server's life (the reference's dummies are stable the
same way: a command that stored one finds it still good), up to `REMEMBERED` of them; past
that a value gets a fresh one. Nothing here logs a value: the dropped providers and the
unmasked warning are the reference's lines, which name none.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable

from execproto import Policy
from execproto.netproxy import (
    UNPROTECTED,
    Brokered,
    Provider,
    ProxyConfig,
    active_providers,
    ca_env,
    dummy_value,
    mask_environment,
)
from execproto.policy import PathRule

log = logging.getLogger("execproto")
REMEMBERED = 1024

_dummies: OrderedDict[tuple[str, str, str], str] = OrderedDict()
_lock = threading.Lock()


def _dummy(provider: Provider, variable: str, real: str) -> str | None:
    key = (provider.name, variable, real)
    with _lock:
        known = _dummies.get(key)
        if known is not None:
            _dummies.move_to_end(key)
            return known
        taken = set(_dummies.values())
    made = dummy_value(provider, real, os.urandom)
    if made is None or made in taken:
        return None
    with _lock:
        _dummies[key] = made
        while len(_dummies) > REMEMBERED:
            _dummies.popitem(last=False)
    return made


def masked(argv: Iterable[str], env: Iterable[tuple[str, str]], proxy: ProxyConfig,
           process_id: str) -> tuple[tuple[tuple[str, str], ...], tuple[Brokered, ...]]:
    """The child's whole environment with the CA's variables, its credentials masked and the
    broker's markers (a ``bash -c`` command's only), and the credentials its proxy brokers.
    Makes the CA at the first call (blocking: it writes the bundle)."""
    from ._authority import authority

    whole = dict(env)
    providers, dropped, inactive = active_providers(proxy.credential_providers, whole)
    for drop in dropped:
        log.warning("%s", drop.message, extra={"fields": {"process": process_id}})
    result = mask_environment(tuple(argv), whole, providers, _dummy, inactive)
    if result.unprotected:
        log.warning("%s", UNPROTECTED, extra={"fields": {"process": process_id}})
    child = result.env
    child.update(ca_env(authority().bundle))
    return tuple(child.items()), result.credentials


def bundle_readable(policy: Policy) -> Policy:
    """A sandbox's ``policy`` with the CA bundle's directory (made now if need be) readable and
    never writable, as the reference makes its bundle readable in a sandbox whose reads leave
    it out. A request that denies the directory or a directory above it (`/`'s implicit
    denial aside) keeps it denied: there the reference's child cannot read it either."""
    from ._authority import authority

    directory = authority().directory
    denied = any(rule.access == "none" and rule.path != "/"
                 and (directory == rule.path or directory.startswith(rule.path.rstrip("/") + "/"))
                 for rule in policy.rules)
    if not denied:
        policy = Policy.of([*policy.rules, PathRule(path=directory, access="read")],
                           policy.network, policy.deny_globs, caps=policy.caps)
    return policy.capped((directory,), "read")
