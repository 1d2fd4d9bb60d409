"""The managed network proxy, for the adapter that serves it.

The core decides (`execproto._netproxy`: the domain policy, the decider, the refusals); the
adapter listens, resolves, asks with a `Question` (about one of the `Protocol` kinds of
connection) in a `ProxyAsked` event, and connects or refuses as the `AnswerProxy` says. What
it needs besides: the proxy's configuration as the spawn carries it (`ProxyConfig`) and the
variables that point a child at the listeners (`proxy_env`, the reference's set).
"""

from __future__ import annotations

from ._netproxy import Protocol, ProxyConfig, Question, proxy_env

__all__ = ["Protocol", "ProxyConfig", "Question", "proxy_env"]
