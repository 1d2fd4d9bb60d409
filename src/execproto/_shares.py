"""Shares of the server-wide caps: who holds how much of them, and who yields to a newcomer.

A connection, a session and a process are held by their client's *keys*: the peer's address
always, and the identity of the token it presented once the server has several tokens (one
token makes every client the same identity: a share by it would bind them all together, so an
empty identity is no key). Each key is a share of its own; a rule looks at every key the
newcomer does not hold itself, so one key of the newcomer's (the single token, a NAT's address)
never makes it yield to itself.

The shares are mostly soft: a key may hold a whole cap while nobody else needs room, and yields
only when the cap is full and a newcomer with another key arrives. So a single client, or every
client behind one proxy, sees the caps it saw before. The one hard share is on processes
(`process_share`): one key may run at most half of ``max_processes``, never less than a whole
session's, because a connected client's running processes are never taken from it, and so
only a bound at the start keeps one client's from filling the server.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ._config import Config

Key = tuple[str, str]  # (kind, value): ("address", "127.0.0.2"), ("token", "ci")
Keys = tuple[Key, ...]


def keys_of(peer: str, identity: str) -> Keys:
    """The keys a client's holdings count under (see the module's docstring)."""
    if identity:
        return (("address", peer), ("token", identity))
    return (("address", peer),)


def describe(key: Key) -> str:
    kind, value = key
    return f"{kind} {value or '(unknown)'}"


def soft_share(cap: int) -> int:
    """What one key keeps of ``cap`` when another needs room: half, so two always fit."""
    return max(1, cap // 2)


def process_share(config: Config) -> int:
    """Processes one key may run at once: half the server's, but always a whole session's."""
    return max(config.max_processes // 2, config.max_session_processes)


def count(holders: Iterable[Keys]) -> Counter[Key]:
    """How many places each key holds, given the keys of every holder."""
    return Counter(key for keys in holders for key in keys)


def yielding(held: Counter[Key], newcomer: Keys, candidates: Iterable[Key],
             above: int | None = None) -> Key | None:
    """The key that makes room for ``newcomer``: of ``candidates`` (keys with something they
    can give up) not the newcomer's own, the one holding the most, if it holds more than
    ``above`` (its share), or, with None, more than the newcomer's key of the same kind holds
    (then a newcomer never takes from a key that has less than it). The first such key in
    ``candidates`` wins a tie, so the choice is the same at every replay."""
    own = dict(newcomer)
    best: Key | None = None
    for key in candidates:
        if key in newcomer:
            continue
        bound = above if above is not None else held[(key[0], own.get(key[0], ""))]
        if held[key] > bound and (best is None or held[key] > held[best]):
            best = key
    return best
