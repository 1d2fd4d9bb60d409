"""The gate of one server's websocket listeners: bounds on connections still in their upgrade.

A connection is let in (`Gate.admit`) within its address's rates, or closed at the accept
before anything is read; in its upgrade it holds a place the gate may give to another; with a
wrong token it waits apart for its late answer. All by token buckets, a few numbers per address,
whatever peer the adapter made (`Upgrading`: what the gate asks of one).
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter
from typing import Any, Protocol

from execproto import Config

log = logging.getLogger("execproto")


class Upgrading(Protocol):
    """A connection in its upgrade, as the gate sees it (a websocket peer)."""

    source: str  # the address its handshakes count against (`source_of`)

    def time_out(self, why: str) -> None:
        """Close it to make room."""

    def cut_short(self) -> None:
        """Close its wrong token's connection at once, with no answer."""


# TLS handshakes (a key exchange and a signature each: half a millisecond of the owner's time
# with RSA-2048 here, several with RSA-4096) that may begin from one address, a second and at
# once; an IPv6 address counts by its /64, which one host is given whole.
HANDSHAKES_PER_ADDRESS, HANDSHAKE_BURST = 32.0, 64.0
# The share of the owner's time handshakes may take, measured, and the most they take at once,
# in seconds: whatever the key costs, established connections keep the rest.
HANDSHAKE_SHARE, HANDSHAKE_TIME_BURST = 0.25, 0.25
# Seconds an address that presented the right token is trusted to be a client's: its handshakes
# wait for no one else's (only for its own rate), so a flood from other addresses delays
# nobody who is known.
PROVEN_FOR = 600.0
ADDRESSES = 4096  # addresses remembered (each kind), the oldest forgotten first
# Wrong tokens waiting for their late answer; past this, the oldest is closed at once.
REFUSED = 16
# Connections an address that gave a wrong token (and not the right one lately) may open, a
# second and at once; past them they are closed at the accept, on every listener. A flood of wrong
# tokens then costs the server an accept and a close each, not a read, a parse and timers: it
# keeps up with the flood, and the listen queue, shared with every client, seldom fills.
WRONG_TOKENS_PER_ADDRESS, WRONG_TOKEN_BURST = 4.0, float(REFUSED)
QUIET = 10.0  # seconds between two lines saying connections were refused at the accept


def source_of(host: str) -> str:
    """The address a connection's handshakes count against: its host, IPv6 by its /64."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return host
    if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack listener
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


class _Bucket:
    """A token bucket: ``rate`` a second, ``burst`` at most; spending may take it below 0."""

    __slots__ = ("level", "at")

    def __init__(self, burst: float, now: float) -> None:
        self.level = burst
        self.at = now

    def left(self, now: float, rate: float, burst: float) -> float:
        self.level = min(burst, self.level + (now - self.at) * rate)
        self.at = now
        return self.level


def _remember(kept: dict[str, Any], key: str, value: Any) -> None:
    """``value`` under ``key`` as the newest, the oldest forgotten past `ADDRESSES`."""
    kept.pop(key, None)
    kept[key] = value
    if len(kept) > ADDRESSES:
        del kept[next(iter(kept))]


class Gate:
    """One server's bounds on connections still in their websocket upgrade.

    Past the cap, an address holding over half the places gives up its oldest to another
    address's newcomer; otherwise the oldest that has had `SPARE` seconds, of the address
    holding the most, is closed to make room (an honest client finishes its upgrade in one
    round trip, and one with the token leaves the gate at once); otherwise the newcomer is.
    So half-open connections, however fast they come, give way to the clients that finish,
    and one address's never to another's.

    A wrong token is answered late (`AUTH_DELAY`): closing its connection early would tell its
    client sooner. Such connections wait apart (`refused`), not in the gate, so a flood of
    wrong tokens holds no place an honest client needs; past `REFUSED`, the oldest is closed
    at once, with no answer.

    Even so each costs a read, a parse and its timers, more than a client's connect costs it,
    and a listener that falls behind drops every client's SYN alike (each then waits a second
    for its retransmit). So an address that gave a wrong token, unless it presented the right
    one lately, may open `WRONG_TOKENS_PER_ADDRESS` connections a second; the rest are closed
    at the accept, before anything is read.

    On a TLS listener every connection begins a handshake, and its signature is most of what
    a flood of canned ClientHellos costs the server. So a connection is let in only within its
    address's rate and, unless the address presented the right token lately, while handshakes
    have taken less than their share of the owner's time (`spent`); otherwise it is closed at
    the accept, before anything is read or computed. All are token buckets, a few numbers per
    address, `ADDRESSES` remembered at most.
    """

    SPARE = 0.05

    def __init__(self, config: Config | None, tls: bool = False) -> None:
        """``tls``: the listener's connections begin with a TLS handshake."""
        config = config or Config()
        self.tls = tls
        self.timeout = config.handshake_timeout
        self.send_timeout = config.send_timeout
        self.limit = config.max_upgrading
        self.upgrading: dict[Upgrading, float] = {}  # oldest first: peer -> when it arrived
        self.refused: dict[Upgrading, None] = {}  # wrong tokens awaiting their answer, oldest first
        self.draining = False  # the server is draining: /readyz and upgrades answer 503
        self._addresses: dict[str, _Bucket] = {}  # oldest first
        self._wrong: dict[str, _Bucket] = {}  # address -> its wrong tokens' bucket, oldest first
        self._proven: dict[str, float] = {}  # address -> when it last presented the token
        self._time: _Bucket | None = None  # the owner's time left for handshakes, in seconds
        self._refusals = 0  # connections refused at the accept since the last line said so
        self._quiet_until = 0.0

    def admit(self, now: float, host: str | None = None) -> bool:
        """Whether a new connection (from ``host``, if known) may begin its upgrade; if not,
        close it at once."""
        if host is not None and self._wrong and not self._guessing_slowly(host, now):
            return False
        if self.tls and host is not None and not self._handshake(host, now):
            return False
        if len(self.upgrading) < self.limit:
            return True
        victim = self._victim(now, None if host is None else source_of(host))
        if victim is None:
            return False
        victim.time_out(f"{self.limit} connections in their upgrade")
        return True

    def _victim(self, now: float, newcomer: str | None) -> Upgrading | None:
        """The connection that makes room, or None (the newcomer is closed). An address that
        holds over half the places gives up its oldest to another's newcomer, however young
        (a flood from one address closes its own connections, never a client's); else, and
        to a newcomer of its own, the oldest that has had `SPARE` seconds, of the address
        holding the most."""
        held = Counter(peer.source for peer in self.upgrading)
        hog, most = held.most_common(1)[0]
        if most > self.limit // 2 and hog != newcomer:
            return next(peer for peer in self.upgrading if peer.source == hog)
        chosen: Upgrading | None = None
        for peer, since in self.upgrading.items():  # oldest first
            if now - since < self.SPARE:
                break  # and every later one is younger
            if chosen is None or held[peer.source] > held[chosen.source]:
                chosen = peer
        return chosen

    def refuse(self, peer: Upgrading, now: float) -> None:
        """``peer``'s wrong token waits for its answer apart, the oldest past `REFUSED` closed;
        its address is counted from now on (`admit`)."""
        if peer.source not in self._wrong:  # this one was let in uncounted
            bucket = _Bucket(WRONG_TOKEN_BURST - 1, now)
            _remember(self._wrong, peer.source, bucket)
        self.upgrading.pop(peer, None)
        self.refused[peer] = None
        if len(self.refused) > REFUSED:
            next(iter(self.refused)).cut_short()

    def _guessing_slowly(self, host: str, now: float) -> bool:
        """Whether a connection from ``host`` may be read: it gave no wrong token, or the right
        one lately, or it is within its rate. Each connection of an address that gave a wrong
        token is counted when it is let in, not when its token is read: a batch accepted at
        once takes no more than what the rate left, and the address's client with the right
        token waits 1/rate at most."""
        source = source_of(host)
        bucket = self._wrong.get(source)
        if bucket is None or now - self._proven.get(source, -PROVEN_FOR) < PROVEN_FOR:
            return True
        if bucket.left(now, WRONG_TOKENS_PER_ADDRESS, WRONG_TOKEN_BURST) >= 1:
            bucket.level -= 1
            return True
        self._refused(host, f"more than {WRONG_TOKENS_PER_ADDRESS:g} wrong tokens a second "
                            f"from {source}", "wrong token rate", now)
        return False

    def _handshake(self, host: str, now: float) -> bool:
        """Whether a TLS handshake from ``host`` may begin now; its peer reports its cost."""
        source = source_of(host)
        bucket = self._addresses.get(source) or _Bucket(HANDSHAKE_BURST, now)
        _remember(self._addresses, source, bucket)
        why = None
        if bucket.left(now, HANDSHAKES_PER_ADDRESS, HANDSHAKE_BURST) < 1:
            why = f"more than {HANDSHAKES_PER_ADDRESS:g} a second from {source}"
        elif now - self._proven.get(source, -PROVEN_FOR) >= PROVEN_FOR:
            if self._time is None:
                self._time = _Bucket(HANDSHAKE_TIME_BURST, now)
            if self._time.left(now, HANDSHAKE_SHARE, HANDSHAKE_TIME_BURST) <= 0:
                why = f"handshakes took {HANDSHAKE_SHARE:.0%} of the server's time"
        if why is None:
            bucket.level -= 1
            return True
        self._refused(host, why, "handshake rate", now)
        return False

    def _refused(self, host: str, why: str, refused: str, now: float) -> None:
        """A connection from ``host`` is closed at the accept: said once in `QUIET` seconds."""
        self._refusals += 1
        if now >= self._quiet_until:  # a line per refusal would cost more than the refusal
            log.warning("connection from %s refused at the accept: %s (%d refused since the "
                        "last such line)", host, why, self._refusals,
                        extra={"fields": {"peer": host, "refused": refused,
                                          "why": why, "count": self._refusals}})
            self._refusals = 0
            self._quiet_until = now + QUIET

    def spent(self, seconds: float, now: float) -> None:
        """A handshake's step took ``seconds`` of the owner's time."""
        if self._time is None:
            self._time = _Bucket(HANDSHAKE_TIME_BURST, now)
        self._time.left(now, HANDSHAKE_SHARE, HANDSHAKE_TIME_BURST)
        self._time.level -= seconds

    def proven(self, label: str, now: float) -> None:
        """A connection from ``label`` (``IP:PORT``) presented the right token (or none was
        needed)."""
        _remember(self._proven, source_of(label.rsplit(":", 1)[0]), now)
