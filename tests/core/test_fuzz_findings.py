"""What the fuzzer (fuzz/fuzz_core.py) found, each as the smallest plain sequence of events.

A finding the core does not yet meet is marked ``xfail(strict=True)`` with what it is: the day
the core meets it, the test passes, pytest reports it as a failure, and the mark goes. The
first two were found by the sequences of the methods added to the fuzzer (``session/end``):
the deadlines that passed ran before an event, so an exit reported before its Tick came with
the due timer's Signal. The next two by the managed network proxy's sequences: a process
launched with a proxy keeps its launch in the core after it is over; a connection that closes
while its client is asked about a connection is sent the decision.
"""

from __future__ import annotations

import json

from execproto import (
    Action,
    AnswerProxy,
    ConnectionClosed,
    ConnectionOpened,
    Event,
    MessageReceived,
    ProcessExited,
    ProcessSpawned,
    ProxyAsked,
    Send,
    ServerCore,
    Signal,
    Spawn,
    StreamClosed,
    Tick,
)
from execproto.netproxy import Question


def _call(msg_id: int, method: str, params: dict[str, object]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})


class _Adapter:
    """One client with one running process "p", as an adapter feeds them."""

    def __init__(self, **start_extra: object) -> None:
        self.core = ServerCore()
        self.now = 0.0
        self.feed(ConnectionOpened(conn=1, session_id="s1"))
        self.feed(MessageReceived(conn=1, data=_call(1, "initialize", {"clientName": "c"})))
        self.feed(MessageReceived(conn=1, data='{"jsonrpc":"2.0","method":"initialized"}'))
        start = {"processId": "p", "argv": ["sh"], "cwd": "file:///tmp", "env": {}, "tty": False,
                 **start_extra}
        actions = self.feed(MessageReceived(conn=1, data=_call(2, "process/start", start)))
        self.proc = next(a.proc for a in actions if isinstance(a, Spawn))
        self.feed(ProcessSpawned(proc=self.proc, pid=100))

    def feed(self, event: Event) -> list[Action]:
        return self.core.handle(event, self.now)


def test_an_ended_session_does_not_signal_a_process_whose_exit_is_being_reported() -> None:
    """``session/end``, then the connection closes: the session expires at once, by a timer
    due now. The adapter reports the process's exit before it ticks: the exit is applied first,
    so the expiry sends no TERM to it."""
    a = _Adapter()
    a.feed(MessageReceived(conn=1, data=_call(3, "session/end", {})))
    a.feed(ConnectionClosed(conn=1))
    assert a.core.next_deadline() == a.now  # the expiry, due at once, not yet ticked
    actions = a.feed(ProcessExited(proc=a.proc, returncode=0))
    assert not [x for x in actions if isinstance(x, Signal)], actions


def test_a_kill_grace_does_not_signal_a_process_whose_exit_is_being_reported() -> None:
    """The same at a terminate's kill grace: the exit reported at the deadline, before its
    Tick, gets no KILL."""
    a = _Adapter()
    a.feed(MessageReceived(conn=1, data=_call(3, "process/terminate", {"processId": "p"})))
    deadline = a.core.next_deadline()
    assert deadline is not None
    a.now = deadline
    actions = a.feed(ProcessExited(proc=a.proc, returncode=0))
    assert not [x for x in actions if isinstance(x, Signal)], actions


PROXY = {"enabled": True, "enableSocks5": False, "enableSocks5Udp": False,
         "allowUpstreamProxy": False, "dangerouslyAllowAllUnixSockets": False, "mode": "full",
         "allowLocalBinding": False, "domains": {"example.com": "allow"}, "unixSockets": None}


def test_a_proxied_process_that_ends_leaves_nothing_behind() -> None:
    """A process started with ``networkProxy`` exits and closes its streams; its client goes
    and every deadline passes: the core holds nothing of it, its proxy's launch included."""
    a = _Adapter(networkProxy={"proxy": PROXY})
    a.feed(ProcessExited(proc=a.proc, returncode=0))
    a.feed(StreamClosed(proc=a.proc, stream="stdout"))
    a.feed(StreamClosed(proc=a.proc, stream="stderr"))
    a.feed(ConnectionClosed(conn=1))
    for _ in range(20):
        deadline = a.core.next_deadline()
        if deadline is None:
            break
        a.now = max(a.now, deadline)
        a.feed(Tick())
    assert a.core.next_deadline() is None
    assert not a.core._procs and not a.core._finalized  # the process itself is gone
    assert not a.core._launches, a.core._launches


def test_a_connection_closed_while_its_client_decides_is_sent_nothing() -> None:
    """The proxy of a process whose client decides misses is asked about one; the client's
    connection closes before it answers: the question is refused, and nothing is sent to the
    connection that is gone."""
    a = _Adapter(networkProxy={"proxy": PROXY, "policyDecisionTimeoutMs": 1000})
    miss = Question(protocol="https_connect", host="other.test", port=443, method="CONNECT",
                    client="127.0.0.1:40000", addresses=("93.184.215.16",))
    asked = a.feed(ProxyAsked(proc=a.proc, ask=1, question=miss, wall=1_800_000_000.0))
    assert [x for x in asked if isinstance(x, Send) and b"network/policyRequest" in x.data]
    actions = a.feed(ConnectionClosed(conn=1))
    (answer,) = [x for x in actions if isinstance(x, AnswerProxy)]
    assert answer.ask == 1 and not answer.allow, answer
    assert not [x for x in actions if isinstance(x, Send)], actions
