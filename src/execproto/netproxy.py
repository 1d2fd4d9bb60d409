"""The managed network proxy, for the adapter that serves it.

The core decides (`execproto._netproxy`: the domain policy, the decider, the refusals); the
adapter listens, resolves, asks with a `Question` (about one of the `Protocol` kinds of
connection) in a `ProxyAsked` event, and connects or refuses as the `AnswerProxy` says. What
it needs besides: the proxy's configuration as the spawn carries it (`ProxyConfig`) and the
variables that point a child at the listeners (`proxy_env`, the reference's set).

With credential masking (`execproto._credentials`), the adapter also masks the child's
credentials (`active_providers`, `mask_environment`, with dummies from `dummy_value` and
randomness of its own), points it at the proxy's CA (`ca_env`), and, for each request it
forwards, opens the tunnels `intercepts` names and puts real values back with `substitute`.
"""

from __future__ import annotations

from ._credentials import (
    UNPROTECTED,
    Brokered,
    Dropped,
    Masking,
    Provider,
    active_providers,
    ca_env,
    dummy_value,
    intercepts,
    mask_environment,
    masks_command,
    substitute,
)
from ._netproxy import Protocol, ProxyConfig, Question, proxy_env

__all__ = [
    "UNPROTECTED", "Brokered", "Dropped", "Masking", "Protocol", "Provider", "ProxyConfig",
    "Question", "active_providers", "ca_env", "dummy_value", "intercepts", "mask_environment",
    "masks_command", "proxy_env", "substitute",
]
