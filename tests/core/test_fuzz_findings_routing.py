"""What the fuzzer (fuzz/fuzz_core.py) found about where the managed proxy's decider is asked,
each as the smallest plain sequence of events, kept so that it stays fixed.
"""

from __future__ import annotations

import json

from execproto import (
    Action,
    AnswerProxy,
    CloseConnection,
    ConnectionOpened,
    Event,
    MessageReceived,
    ProcessSpawned,
    ProxyAsked,
    Send,
    ServerCore,
    Spawn,
)
from execproto.netproxy import Question

PROXY = {"enabled": True, "enableSocks5": False, "enableSocks5Udp": False,
         "allowUpstreamProxy": False, "dangerouslyAllowAllUnixSockets": False, "mode": "full",
         "allowLocalBinding": False, "domains": {"example.com": "allow"}, "unixSockets": None}
MISS = Question(protocol="https_connect", host="other.test", port=443, method="CONNECT",
                client="127.0.0.1:40000", addresses=("93.184.215.16",))


def _call(msg_id: int, method: str, params: dict[str, object]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})


class _Adapter:
    """One client with one running process "p" under a proxy whose client decides misses."""

    def __init__(self) -> None:
        self.core = ServerCore()
        self.feed(ConnectionOpened(conn=1, session_id="s1"))
        self.feed(MessageReceived(conn=1, data=_call(1, "initialize", {"clientName": "c"})))
        self.feed(MessageReceived(conn=1, data='{"jsonrpc":"2.0","method":"initialized"}'))
        start = {"processId": "p", "argv": ["sh"], "cwd": "file:///tmp", "env": {}, "tty": False,
                 "networkProxy": {"proxy": PROXY, "policyDecisionTimeoutMs": 60_000}}
        actions = self.feed(MessageReceived(conn=1, data=_call(2, "process/start", start)))
        self.proc = next(a.proc for a in actions if isinstance(a, Spawn))
        self.feed(ProcessSpawned(proc=self.proc, pid=100))

    def feed(self, event: Event) -> list[Action]:
        return self.core.handle(event, 0.0)


def test_a_connection_the_core_is_closing_is_not_asked() -> None:
    """The core closes the client's connection (a notification it does not know: a protocol
    error). Before the adapter reports it closed, the proxy of that client's process asks
    about a host its policy misses. The client cannot answer any more (what a connection being
    closed sends is ignored, and a websocket sends nothing after its close), so it is not
    asked: the question is refused at once, as for a session with no connection, rather than
    waiting (up to ``policyDecisionTimeoutMs``) for the close to be reported."""
    a = _Adapter()
    closing = a.feed(MessageReceived(conn=1, data='{"jsonrpc":"2.0","method":"nope"}'))
    assert [x for x in closing if isinstance(x, CloseConnection)], closing
    actions = a.feed(ProxyAsked(proc=a.proc, ask=1, question=MISS, wall=1_800_000_000.0))
    asked = [x for x in actions if isinstance(x, Send) and b"network/policyRequest" in x.data]
    assert not asked, asked
    (answer,) = [x for x in actions if isinstance(x, AnswerProxy)]
    assert answer.ask == 1 and not answer.allow, answer

