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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and editors see; at run time, `__getattr__` below
    from ._credentials import UNPROTECTED as UNPROTECTED
    from ._credentials import Brokered as Brokered
    from ._credentials import Dropped as Dropped
    from ._credentials import Masking as Masking
    from ._credentials import Provider as Provider
    from ._credentials import active_providers as active_providers
    from ._credentials import ca_env as ca_env
    from ._credentials import dummy_value as dummy_value
    from ._credentials import intercepts as intercepts
    from ._credentials import mask_environment as mask_environment
    from ._credentials import masks_command as masks_command
    from ._credentials import substitute as substitute
    from ._netproxy import Protocol as Protocol
    from ._netproxy import ProxyConfig as ProxyConfig
    from ._netproxy import Question as Question
    from ._netproxy import proxy_env as proxy_env

__all__ = [
    "UNPROTECTED", "Brokered", "Dropped", "Masking", "Protocol", "Provider", "ProxyConfig",
    "Question", "active_providers", "ca_env", "dummy_value", "intercepts", "mask_environment",
    "masks_command", "proxy_env", "substitute",
]

# Where each name lives. Nothing is imported until a name is first used (PEP 562): a server
# loads the proxy's policy, and credential masking, at the first start that launches a proxy.
_WHERE = {
    **dict.fromkeys(("Protocol", "ProxyConfig", "Question", "proxy_env"), "_netproxy"),
    **{name: "_credentials" for name in __all__
       if name not in ("Protocol", "ProxyConfig", "Question", "proxy_env")},
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The import statement's own path, as the package's `__getattr__` takes.
    value = getattr(__import__(f"{__package__}.{module}", fromlist=[name]), name)
    globals()[name] = value  # found once: from now on a plain global
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
