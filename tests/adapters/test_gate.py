"""The upgrade gate's bounds, with no I/O: TLS handshakes per address and in all, the addresses
it remembers, wrong tokens waiting for their answer apart, and an address's wrong tokens past its
rate closed at the accept (test_handshake_flood.py runs the floods against real servers)."""

from __future__ import annotations

from collections.abc import Callable

from execproto import Config, ServerCore
from execproto.adapters._wire._connections import Connections
from execproto.adapters._wire._gate import (
    ADDRESSES,
    HANDSHAKE_BURST,
    HANDSHAKE_SHARE,
    HANDSHAKE_TIME_BURST,
    HANDSHAKES_PER_ADDRESS,
    REFUSED,
    WRONG_TOKEN_BURST,
    WRONG_TOKENS_PER_ADDRESS,
    Gate,
)
from execproto.adapters._wire._peer import PeerState, WsPeer

from .test_auth import UPGRADE


def admitted(gate: Gate, host: str, now: float, tries: int) -> int:
    let_in = 0
    for _ in range(tries):
        if gate.admit(now, host):
            let_in += 1
            gate.upgrading.clear()  # as if each finished at once: only the rate counts here
    return let_in


def test_an_address_gets_its_burst_then_its_rate_and_others_are_not_held_up() -> None:
    gate = Gate(Config(), tls=True)
    burst = int(HANDSHAKE_BURST)
    assert admitted(gate, "127.0.0.2", 0.0, burst * 2) == burst
    assert admitted(gate, "127.0.0.1", 0.0, 10) == 10
    assert admitted(gate, "127.0.0.2", 1.0, burst) == int(HANDSHAKES_PER_ADDRESS)


def test_a_plain_listener_counts_no_handshakes() -> None:
    gate = Gate(Config())
    assert admitted(gate, "127.0.0.2", 0.0, int(HANDSHAKE_BURST) * 2) == HANDSHAKE_BURST * 2


def test_an_ipv6_host_counts_by_its_64_and_a_mapped_ipv4_as_itself() -> None:
    gate = Gate(Config(), tls=True)
    burst = int(HANDSHAKE_BURST)
    assert admitted(gate, "2001:db8::1", 0.0, burst) == burst
    assert admitted(gate, "2001:db8::2:3", 0.0, 1) == 0  # the same /64
    assert admitted(gate, "2001:db8:0:1::1", 0.0, 1) == 1
    assert admitted(gate, "::ffff:10.0.0.1", 0.0, burst) == burst
    assert admitted(gate, "10.0.0.1", 0.0, 1) == 0


def test_past_the_share_only_addresses_that_gave_the_token_may_begin_one() -> None:
    gate = Gate(Config(), tls=True)
    gate.proven("127.0.0.1:5000", 0.0)
    gate.spent(HANDSHAKE_TIME_BURST, 0.0)  # handshakes took all the time there was
    assert admitted(gate, "127.0.0.2", 0.0, 1) == 0
    assert admitted(gate, "127.0.0.1", 0.0, 1) == 1
    # The share comes back with time.
    assert admitted(gate, "127.0.0.2", 0.1 / HANDSHAKE_SHARE, 1) == 1


def test_the_addresses_remembered_are_bounded() -> None:
    gate = Gate(Config(), tls=True)
    for i in range(ADDRESSES + 100):
        gate.admit(0.0, f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
        gate.proven(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:1", 0.0)
        gate.upgrading.clear()
    assert len(gate._addresses) == len(gate._proven) == ADDRESSES
    assert "10.0.0.0" not in gate._addresses  # the oldest were forgotten


class Clock:
    """The part of a `Loop` a peer uses: the time, and timers kept unfired."""

    def __init__(self) -> None:
        self.timers: list[Callable[[], None]] = []

    def now(self) -> float:
        return 0.0

    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        self.timers.append(callback)
        return lambda: None


def test_wrong_tokens_wait_apart_and_the_oldest_gives_way() -> None:
    clock = Clock()
    core = ServerCore()
    connections = Connections(clock, lambda event: None, lambda: core)  # type: ignore[arg-type]
    gate = Gate(Config())
    hung_up: list[int] = []
    peers = []
    for i in range(REFUSED + 3):
        peer = WsPeer(connections, lambda parts: None, lambda i=i: hung_up.append(i),
                      "the-token", gate, f"127.0.0.1:{i}", abort=lambda: None, ping_interval=30)
        peer.received(UPGRADE + b"Authorization: Bearer nope\r\n\r\n", f"127.0.0.1:{i}")
        peers.append(peer)
    # None holds a place in the gate; past REFUSED the oldest were closed at once, unanswered.
    assert gate.upgrading == {}
    assert list(gate.refused) == peers[3:]
    assert hung_up == [0, 1, 2]
    assert all(peer.state is PeerState.REFUSING for peer in peers[:3])


class Arrivals:
    """Peers in their upgrade at a gate of 4 places, and the labels of those closed."""

    def __init__(self) -> None:
        core = ServerCore()
        self.connections = Connections(Clock(), lambda event: None,  # type: ignore[arg-type]
                                       lambda: core)
        self.gate = Gate(Config(max_upgrading=4))
        self.hung_up: list[str] = []

    def arrive(self, label: str) -> WsPeer:
        return WsPeer(self.connections, lambda parts: None, lambda: self.hung_up.append(label),
                      "the-token", self.gate, label, abort=lambda: None, ping_interval=30)


def test_a_full_gate_closes_the_flooding_addresss_oldest_not_anothers() -> None:
    at = Arrivals()
    honest = at.arrive("127.0.0.1:1")  # the oldest: a slow client, mid-upgrade
    flood = [at.arrive(f"127.0.0.2:{i}") for i in range(3)]
    assert at.gate.admit(1.0, "127.0.0.2")  # room is made...
    assert at.hung_up == ["127.0.0.2:0"]  # ...by the flood's oldest, not the client's
    assert honest in at.gate.upgrading and flood[0] not in at.gate.upgrading


def test_an_address_holding_over_half_the_gate_makes_room_however_young_its_connections() -> None:
    at = Arrivals()
    for i in range(4):
        at.arrive(f"127.0.0.2:{i}")
    assert not at.gate.admit(0.0, "127.0.0.2")  # its own newcomer waits for SPARE...
    assert at.gate.admit(0.0, "127.0.0.1")  # ...another's gets its oldest place, at once
    assert at.hung_up == ["127.0.0.2:0"]
    at.arrive("127.0.0.1:9")
    assert at.gate.admit(1.0, "127.0.0.2")  # and its own, once its oldest had SPARE
    assert at.hung_up == ["127.0.0.2:0", "127.0.0.2:1"]


class Ticking(Clock):
    """A `Clock` whose time is set by the test."""

    def __init__(self) -> None:
        super().__init__()
        self.at = 0.0

    def now(self) -> float:
        return self.at


def test_an_address_past_its_wrong_tokens_is_closed_at_the_accept_and_no_other() -> None:
    """Each wrong token costs the server a read, a parse and timers, more than its client's
    connect: past `WRONG_TOKEN_BURST` (then `WRONG_TOKENS_PER_ADDRESS` a second), the address's
    connections are closed at the accept, on a plain listener too, so a flood cannot fill the
    listen queue every client shares."""
    clock = Ticking()
    core = ServerCore()
    connections = Connections(clock, lambda event: None, lambda: core)  # type: ignore[arg-type]
    gate = Gate(Config())

    def guess(host: str) -> None:
        label = f"{host}:{len(gate.refused)}"
        peer = WsPeer(connections, lambda parts: None, lambda: None, "the-token", gate, label,
                      abort=lambda: None, ping_interval=30)
        peer.received(UPGRADE + b"Authorization: Bearer nope\r\n\r\n", label)

    for _ in range(int(WRONG_TOKEN_BURST)):
        assert gate.admit(clock.at, "127.0.0.2")
        guess("127.0.0.2")
    assert not gate.admit(clock.at, "127.0.0.2")  # closed before anything is read
    assert gate.admit(clock.at, "127.0.0.1")  # another address is not held up
    clock.at += 1 / WRONG_TOKENS_PER_ADDRESS  # the rate gives one more guess
    assert gate.admit(clock.at, "127.0.0.2")
    guess("127.0.0.2")
    assert not gate.admit(clock.at, "127.0.0.2")
    # An address that presented the right token lately is not shut out by wrong ones from it
    # (another of its clients, say): the others' guesses are answered late as ever.
    for _ in range(int(WRONG_TOKEN_BURST) * 2):
        guess("127.0.0.3")
    gate.proven("127.0.0.3:1", clock.at)
    assert gate.admit(clock.at, "127.0.0.3")
