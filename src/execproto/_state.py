"""The state every part of the server core shares, and the helpers that emit actions.

`ServerCore` is assembled from handler classes (processes, services) that all derive from this
one, so each concern lives in its own small module while there is still one owner of the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from . import _descriptors
from ._config import Config, Host
from ._errors import LocalProtocolError, RpcError, invalid_request
from ._jsonrpc import Id, encode_error, encode_notification, encode_result
from ._lifecycle import Timer
from ._process import Process
from ._records import Record
from ._session import Connection, Session
from ._stats import Stats
from ._timers import Timers
from .actions import Action, Send

if TYPE_CHECKING:
    # Only types here: the proxy's policy is loaded at the first start that launches one.
    from ._netproxy import ProxyLaunch, Question


@attrs.frozen(repr=False, eq=False, slots=False)
class PendingAsk(Record):
    """A question the client's decider was asked (``network/policyRequest``), unanswered."""

    ask: int  # the adapter's, for the `AnswerProxy`
    proc: int
    process_id: str
    session_id: str
    question: Question
    clock: float  # wall clock minus the core's, when asked: for the decision's timestamp


class CoreState:
    stats: Stats

    def __init__(self, config: Config, host: Host) -> None:
        self.config = config
        self.host = host
        self._now = 0.0
        # Filled by one `handle()` call and handed back whole at its end.
        self._actions: list[Action] = []
        self._timers = Timers()
        self._conns: dict[int, Connection] = {}
        self._sessions: dict[str, Session] = {}
        # Processes spawned (or being spawned) and not yet finalized, by the core's handle.
        self._procs: dict[int, Process] = {}
        # Processes terminated to make room for another client's start (`_reclaim`): they no
        # longer count toward max_processes, so that start goes on at once.
        self._reclaimed: set[int] = set()
        # Finalized (closed) processes still readable, by handle, until their eviction.
        self._finalized: dict[int, Process] = {}
        # The output their logs kept when they closed, each and in all (Config.max_closed_bytes).
        self._closed_bytes: dict[int, int] = {}
        self._closed_total = 0
        # Bytes held in the logs of live processes whose session is detached (see
        # Config.max_held_bytes); counted up as output arrives, counted afresh when a session
        # or process changes state.
        self._held_bytes = 0
        # Stdin given to processes and not yet written, and writes waiting their turn, in all
        # (Config.max_stdin_total).
        self._stdin_total = 0
        # What processes and open fs handles may hold together (see _descriptors).
        self._descriptor_budget = _descriptors.budget(config, host.descriptor_limit)
        # A Drain came: no new processes (`process/start` is refused) or connections.
        self._draining = False
        # The managed network proxy of each process that has one, till it is forgotten; the
        # decider questions sent to clients and not yet answered, by (conn, request id).
        self._launches: dict[int, ProxyLaunch] = {}
        self._asks: dict[tuple[int, int], PendingAsk] = {}
        self._next_request = 1
        self._next_proc = 1
        self._next_op = 1
        self._next_token = 1

    # -- emitting -----------------------------------------------------------------------------

    def _emit(self, action: Action) -> None:
        self._actions.append(action)

    def _respond(self, conn: int, msg_id: Id, result: Any) -> None:
        self.stats.answered(conn, msg_id, True, self._now)
        self._actions.append(Send(conn=conn, data=encode_result(msg_id, result)))

    def _fail(self, conn: int, msg_id: Id, error: RpcError) -> None:
        self.stats.answered(conn, msg_id, False, self._now)
        self._actions.append(Send(conn=conn, data=encode_error(msg_id, error)))

    def _notify(self, session: Session, method: str, params: Any) -> None:
        if session.conn is not None:
            self._actions.append(Send(conn=session.conn, data=encode_notification(method, params)))

    def _check_descriptors(self, cost: int) -> None:
        """Refuse what would take more descriptors than processes and fs handles may hold."""
        budget = self._descriptor_budget
        if budget is None:
            return
        in_use = _descriptors.PER_PROCESS * len(self._procs)
        in_use += sum(len(c.fs_handles) for c in self._conns.values())
        if in_use + cost > budget:
            limit = self.host.descriptor_limit
            assert limit is not None
            raise invalid_request(_descriptors.refusal(limit, budget))

    def _set_timer(self, key: tuple[Timer, Any], delay: float) -> None:
        self._timers.set(key, self._now + delay)

    # -- lookups --------------------------------------------------------------------------------

    def _connection(self, conn: int) -> Connection:
        try:
            return self._conns[conn]
        except KeyError:
            raise LocalProtocolError(f"connection {conn} is not open") from None

    def _live_process(self, proc: int) -> Process | None:
        """The unfinalized process ``proc``, or None for one already finalized.

        Events for a finalized process are expected (the adapter may have queued them before it
        carried out `Finalize`) and are dropped; a handle the core never issued is a bug.
        """
        process = self._procs.get(proc)
        if process is None and not 0 < proc < self._next_proc:
            raise LocalProtocolError(f"process handle {proc} was never issued")
        return process

    def _take_op(self) -> int:
        op = self._next_op
        self._next_op += 1
        return op
