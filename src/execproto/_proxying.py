"""The managed network proxy's decisions: each connection a process's proxy is asked for.

The adapter's listeners turn every request into a `ProxyAsked` (the host already resolved);
the policy (`_netproxy`) rules, and the answer goes back as `AnswerProxy`. Each decision is
told to the client too (``network/policyDecision``). Where the policy says "ask" (a host not
allowlisted, or a review domain, with ``policyDecisionTimeoutMs`` set), the session's client
is asked with a request of the server's own (``network/policyRequest``): its answer rules,
and no answer in time, a closed connection or a detached session deny.

The policy (`_netproxy`) is imported where it is used: it is loaded at the first start that
launches a proxy (`_processes`), before which nothing here runs, so no server's start pays for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._jsonrpc import ClientResponse, encode_request
from ._lifecycle import Timer
from ._process import Process
from ._session import Connection
from ._state import CoreState, PendingAsk
from .actions import AnswerProxy, Send
from .events import ProxyAsked

if TYPE_CHECKING:
    from ._netproxy import Question, Verdict

# Questions one connection's decider may have unanswered at once: past it, the next is denied
# at once (a sandbox opening connections in a loop must not grow the server's memory).
MAX_ASKS_PER_CONNECTION = 256
SOCKS = ("socks5_tcp", "socks5_udp")


class ProxyHandlers(CoreState):
    def _on_proxy_asked(self, event: ProxyAsked) -> None:
        from . import _netproxy

        process = self._procs.get(event.proc)
        launch = self._launches.get(event.proc)
        if process is None or launch is None:
            self._answer(event.ask, event.question, _gone())
            return
        clock = event.wall - self._now
        decider = launch.policy_decision_timeout_ms is not None
        verdicts = _netproxy.verdicts(launch.proxy, event.question, decider)
        if verdicts[-1].decision != "ask":
            self._decided(process, event.ask, event.question, verdicts, clock)
            return
        conn = process.session.conn
        asked = sum(1 for key in self._asks if key[0] == conn)
        # A connection being closed cannot answer (what it sends now is ignored): not asked,
        # refused at once as for a session with no connection.
        if conn is None or self._conns[conn].closing or asked >= MAX_ASKS_PER_CONNECTION:
            self._decided(process, event.ask, event.question, (_no_answer(),), clock)
            return
        request_id = self._next_request
        self._next_request += 1
        self._asks[(conn, request_id)] = PendingAsk(
            event.ask, process.proc, process.process_id, process.session.session_id,
            event.question, clock)
        params = _netproxy.policy_request(process.process_id, event.question)
        self._emit(Send(conn=conn, data=encode_request(request_id, "network/policyRequest",
                                                        params)))
        assert launch.policy_decision_timeout_ms is not None
        self._set_timer((Timer.DECIDE, (conn, request_id)),
                        launch.policy_decision_timeout_ms / 1000)

    def _on_client_response(self, c: Connection, response: ClientResponse) -> bool:
        """The client answered a question of ours; False if it answered nothing we asked."""
        if not isinstance(response.id, int) or isinstance(response.id, bool):
            return False
        pending = self._asks.pop((c.conn, response.id), None)
        if pending is None:
            return False
        self._timers.cancel((Timer.DECIDE, (c.conn, response.id)))
        from . import _netproxy

        result = response.result if response.error is None else None
        self._settle_ask(pending, _netproxy.decider_verdict(result))
        return True

    def _on_decide_due(self, key: tuple[int, int]) -> None:
        pending = self._asks.pop(key)
        self._settle_ask(pending, _no_answer())

    def _asks_closed(self, conn: int) -> None:
        """The connection closed: its questions get no answer, so each is denied now."""
        for key in [key for key in self._asks if key[0] == conn]:
            self._timers.cancel((Timer.DECIDE, key))
            self._settle_ask(self._asks.pop(key), _no_answer())

    def _settle_ask(self, pending: PendingAsk, answer: Verdict) -> None:
        from . import _netproxy

        launch = self._launches.get(pending.proc)
        process = self._procs.get(pending.proc)
        if launch is None or process is None:
            self._answer(pending.ask, pending.question, _gone())
            return
        verdicts = _netproxy.after_decider(launch.proxy, pending.question, answer)
        self._decided(process, pending.ask, pending.question, verdicts, pending.clock)

    def _decided(self, process: Process, ask: int, question: Question,
                 verdicts: tuple[Verdict, ...], clock: float) -> None:
        """Answer the listener by the last verdict, and tell the client each of them. A
        connection whose sending is blocked is not told (it reads nothing now, and a sandbox
        asking in a loop would fill its buffer): the answer itself never waits."""
        from . import _netproxy

        self._answer(ask, question, verdicts[-1])
        conn = process.session.conn
        if conn is None or self._conns[conn].blocked:
            return
        for verdict in verdicts:
            params = _netproxy.decision_notification(process.process_id, clock + self._now,
                                                     question, verdict)
            self._notify(process.session, "network/policyDecision", params)

    def _answer(self, ask: int, question: Question, verdict: Verdict) -> None:
        from . import _netproxy

        if verdict.allowed:
            self._emit(AnswerProxy(ask=ask, allow=True))
            return
        code = _netproxy.socks_reply_code(verdict)
        if question.protocol in SOCKS:  # a SOCKS5 client hears a reply code, and no body
            self._emit(AnswerProxy(ask=ask, allow=False, socks_code=code))
            return
        status, headers, body = _netproxy.refusal(question, verdict)
        self._emit(AnswerProxy(ask=ask, allow=False, refusal=(status, tuple(headers), body),
                               socks_code=code))


def _no_answer() -> Verdict:
    """What the client's decider said when it said nothing in time, or could not."""
    from . import _netproxy

    return _netproxy.decider_verdict(None)


def _gone() -> Verdict:
    """What a question is answered when its process is gone (its listeners are closing)."""
    from . import _netproxy

    return _netproxy.Verdict(decision="deny", reason=_netproxy.NOT_ALLOWED)
