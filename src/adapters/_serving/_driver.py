"""The part of every adapter that is not about its event loop: one owner of the core.

Readers (sockets, pipes, pidfds) only turn I/O into events and `feed` them. Events are queued
and handled one at a time, so carrying out an action never re-enters ``handle()``: an action
that causes an event (a spawn reporting ``ProcessSpawned``) just queues it. The event loop itself
is reached through the small `Loop` interface that each adapter implements.

The driver owns only that: the queue, the core's timer, the stop, and the core's failure. Each
action is carried out by the room that owns its family's state, through one table: the
processes (`_children`), file calls and watched paths (`_fs_calls`), ``http/request`` calls
(`_http_calls`), forwarded streams (`_forward`), the connections (`Connections`). Each room
gets the loop and ``feed``, and nothing of another's. The rooms few servers use (files,
``http/request``, forwarding) are imported and made at their first action (`_later`), and the
core itself at its first event, so that a server's start pays for none of them; the stop
after the core failed is `_failure`'s. What the rooms keep for one connection follows the
events its peer feeds, through the reactions `Connections` runs: its fs handles (`Files`,
made with the driver, as they outlive a call), its calls still queued, its held fs calls.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execproto import (
    Action,
    CloseConnection,
    ConnectionClosed,
    ConnectionOpened,
    Event,
    Send,
    SendBlocked,
    SendDrained,
    ServerCore,
    Shutdown,
    Spawn,
    Tick,
)

from .._files._fs import Files
from .._loop import Loop
from .._processes import _posix
from .._processes._children import Children
from .._wire._connections import Connections
from ..backends import Backend, LocalBackend
from ._failure import CLOSE_WAIT, FailureStop
from ._later import LaterRooms

if TYPE_CHECKING:
    from execproto.trace import Recorder

__all__ = ["Driver", "Loop"]

log = logging.getLogger("execproto")

TRIM_INTERVAL = 2.0  # seconds between releases of free heap memory (a no-op trim: ~0.4 ms)


class Driver(FailureStop):
    """Feeds events to the core and carries out its actions over a `Loop`."""

    def __init__(
        self,
        core: ServerCore | Recorder | Callable[[], ServerCore | Recorder],
        loop: Loop,
        files: Files | None = None,
        backend: Backend | None = None,
        tune_heap: bool = False,
    ) -> None:
        """``tune_heap``: keep output buffers in the heap (`_posix.keep_buffers_in_heap`, for
        the whole process) and give free heap memory back every TRIM_INTERVAL on the loop.
        Faster, but no library's business in a host's process: ``execproto serve`` asks.
        ``core`` may be what makes it, called at its first need (`_serve.Server`'s waits for
        the backend's probe, which what ``initialize`` announces depends on). The heap is
        tuned at the first event, with the first trim scheduled: no output buffer is made
        before, and a start then need not load ctypes."""
        self._core: ServerCore | Recorder | None = None
        self._recorder: Recorder | None = None
        self._make_core: Callable[[], ServerCore | Recorder] | None = None
        if callable(core):
            self._make_core = core
        else:
            self.core = core
        self.loop = loop
        self.files = files or Files()
        self._queue: deque[Event] = deque()
        self._busy = False
        self._cancel_tick: Callable[[], None] | None = None
        self._tick_at: float | None = None
        # Whether a periodic release of free heap memory is scheduled; never without tuning.
        self._trimming = not tune_heap
        self._stopping = False
        self._close_waiting = self._close_waited = False  # see `_check_idle`
        self.on_idle: Callable[[], None] | None = None  # called after a drain leaves it idle
        # What the core raised, after which the driver only stops (see `_failure`); the
        # adapter's `on_failure` starts the same stop as SIGTERM does.
        self.failure: BaseException | None = None
        self.on_failure: Callable[[], None] | None = None
        self.children = Children(loop, self.feed, backend or LocalBackend(),  # the rooms
                                 lambda: self.failure is not None)
        self.children.on_cleaned = self._check_idle  # a drain and a stop wait for cleanups
        # What the rooms do for a connection as its peer reports it, before the core hears: its
        # fs/open handles live from its opening to its close, no fs call of its starts while it
        # is blocked (unread answers would pile up), and its queued calls go with it.
        self.connections = Connections(loop, self.feed, lambda: self.core, {
            ConnectionOpened: lambda event: self.files.open_connection(event.conn),
            SendBlocked: self._blocked,
            SendDrained: self._drained,
            ConnectionClosed: self._connection_gone,
        })
        self.later = LaterRooms(loop, self.feed, {
            "files": (self.files, self.connections.stuck),
            "http": (self.connections.stuck,),
            "forwards": (self.children.backend,)})
        # Which room carries out each kind of action (a `_later` room's joins once it is made).
        self._run: dict[type, Callable[[Any], None]] = {
            **self.connections.run,
            **self.children.run,
        }
        # Who answers for an action that raised, where someone waits on it (for a `_later`
        # room's action, its room).
        self._raised: dict[type, Callable[[Any, str], None]] = {
            Spawn: self.children.spawn_raised,
            Send: self.connections.raised,
            CloseConnection: self.connections.raised,
        }

    @property
    def core(self) -> ServerCore | Recorder:
        if self._core is None:
            assert self._make_core is not None
            self.core = self._make_core()
        assert self._core is not None
        return self._core

    @core.setter
    def core(self, core: ServerCore | Recorder) -> None:
        self._core = core
        # A core that is no ServerCore records a trace (execproto.trace, imported only then).
        self._recorder = None if isinstance(core, ServerCore) else core

    def _first(self, action: Action) -> Callable[[Any], None]:
        """What carries out an action of a kind `_run` has no room for yet: a `_later` room's
        first, which makes the room, and its kinds join `_run`."""
        later = self.later.run_of(action)
        if later is None:
            raise LookupError(f"no room carries out {type(action).__name__}")
        self._run.update(later)
        return later[type(action)]

    # -- the owner ------------------------------------------------------------------------------

    def feed(self, event: Event) -> None:
        if self.failure is not None:
            self._stopped_after_failure()  # nothing can be handled any more: just stop
            return
        self._queue.append(event)
        if self._busy:
            return  # the drain below is already running further up this stack
        self._busy = True
        try:
            while self._queue:
                event = self._queue.popleft()
                try:
                    actions = self.core.handle(event, self.loop.now())
                except Exception as exc:  # noqa: BLE001 - logged there, and fatal
                    self._core_failed(event, exc)
                    return
                if self._recorder is not None and self._recorder.sink_failure is not None:
                    self._trace_stopped(self._recorder)
                for action in actions:
                    try:
                        (self._run.get(type(action)) or self._first(action))(action)
                    except Exception as exc:  # a bug, or the OS saying no: never a dead server
                        log.exception("carrying out %s failed", type(action).__name__)
                        try:
                            self._failed(action, exc)
                        except Exception:
                            log.exception("and answering for it failed too")
        finally:
            self._busy = False
        self._schedule_tick()
        if not self._trimming:
            self._trimming = True
            _posix.keep_buffers_in_heap()
            self.loop.call_at(self.loop.now() + TRIM_INTERVAL, self._trim)
        self._check_idle()

    def _check_idle(self) -> None:
        """Tell `on_idle` once every process is finalized; when stopping, once the connections
        are gone too (what was queued for them sent, and their close frames), or CLOSE_WAIT
        after the processes."""
        if self.on_idle is None or not self.idle:
            return
        if self._stopping and self.connections and not self._close_waited:
            if not self._close_waiting:
                self._close_waiting = True
                self.loop.call_at(self.loop.now() + CLOSE_WAIT, self._close_wait_over)
            return
        self.on_idle()

    def _close_wait_over(self) -> None:
        self._close_waited = True
        self._check_idle()

    @property
    def idle(self) -> bool:
        """Every process finalized, its sandbox cleaned up too (that runs off the owner)."""
        core = self._core  # none made yet: nothing ever ran
        return (core is None or core.idle) and not self.children.cleanups

    def _trace_stopped(self, recorder: Recorder) -> None:
        """The trace could not be written: one line says so, and the server goes on."""
        log.error("the trace stopped: writing it failed (%s: %s); the server goes on untraced",
                  type(recorder.sink_failure).__name__, recorder.sink_failure)
        self.core = recorder.core

    def _failed(self, action: Action, exc: Exception) -> None:
        """An action could not be carried out: give the core the answer its request is owed,
        so no id stays taken and no client waits forever. Actions nobody waits on (a signal,
        a pause, stdin) are only logged; the process's own events still come."""
        answer = self._raised.get(type(action)) or self.later.raised_of(action)
        if answer is not None:
            answer(action, f"{type(exc).__name__}: {exc}")

    def _trim(self) -> None:
        """Output buffers come from the heap (see `_posix.keep_buffers_in_heap`); the memory
        of evicted logs and finished bursts is given back here, every TRIM_INTERVAL."""
        _posix.release_free_memory()
        done = self.failure is not None or self.idle
        if not (self._stopping and done):  # an embedding host's loop lives on
            self.loop.call_at(self.loop.now() + TRIM_INTERVAL, self._trim)

    def _schedule_tick(self) -> None:
        when = self.core.next_deadline()
        if when == self._tick_at:
            return
        if self._cancel_tick is not None:
            self._cancel_tick()
            self._cancel_tick = None
        self._tick_at = when
        if when is not None:
            self._cancel_tick = self.loop.call_at(when, self._on_tick)

    def _on_tick(self) -> None:
        self._cancel_tick = self._tick_at = None
        self.feed(Tick())

    def _blocked(self, event: SendBlocked) -> None:
        if (files := self.later.files) is not None:
            files.hold(event.conn)

    def _drained(self, event: SendDrained) -> None:
        if (files := self.later.files) is not None:
            files.release(event.conn)

    def _connection_gone(self, event: ConnectionClosed) -> None:
        self.files.close_connection(event.conn)
        if (files := self.later.files) is not None:
            files.drop(event.conn)
        if (http := self.later.http) is not None:
            http.drop(event.conn)

    # -- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop: close every connection, terminate every process; `on_idle` fires when done.
        After a core failure everything is already killed: it fires once the connections are
        gone, or after CLOSE_WAIT."""
        self._stopping = True
        if self.failure is not None:
            self._stop_after_failure()
            return
        self.feed(Shutdown())
        if (http := self.later.http) is not None:
            http.cancel_all()  # the calls whose connection has not closed yet
        self.children.stopping()

    def close(self) -> None:
        """After the stop: kill whatever the processes left running, and remove their cgroups."""
        if (files := self.later.files) is not None:
            files.close()
        if (forwards := self.later.forwards) is not None:
            forwards.close_all()
        self.children.close()
