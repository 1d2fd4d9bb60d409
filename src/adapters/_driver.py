"""The part of every adapter that is not about its event loop: one owner of the core.

Readers (sockets, pipes, pidfds) only turn I/O into events and `feed` them. Events are queued
and handled one at a time, so carrying out an action never re-enters ``handle()``: an action
that causes an event (a spawn reporting ``ProcessSpawned``) just queues it. The event loop itself
is reached through the small `Loop` interface that each adapter implements.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from execproto import (
    INTERNAL_ERROR,
    Action,
    CancelHttp,
    CloseConnection,
    CloseStdin,
    Event,
    Finalize,
    FinalizeFailed,
    FsCompleted,
    HttpBodyReceived,
    HttpFinished,
    HttpResponded,
    OutputReceived,
    PauseOutput,
    ProcessExited,
    ProcessSpawned,
    ResizeTerminal,
    ResumeOutput,
    RpcError,
    RunFs,
    RunHttp,
    Send,
    ServerCore,
    Shutdown,
    Signal,
    Spawn,
    SpawnFailed,
    StdinWritten,
    StreamClosed,
    Tick,
    Unwatch,
    WatchMissing,
    WriteStdin,
)
from execproto._trace import Recorder
from execproto.events import Stream

from . import _cgroups, _http, _posix
from ._fs import Files
from ._shares import Shares
from ._watch import Watches
from .backends import Backend, LocalBackend, Refused

if TYPE_CHECKING:
    from ._peer import Peer

log = logging.getLogger("execproto")

# Reads per wakeup: large, so a fast writer costs few events, yet bounded, so one busy process
# cannot hold the loop (the pipe itself holds 1 MiB).
READ_SIZE = 256 << 10
TRIM_INTERVAL = 2.0  # seconds between releases of free heap memory (a no-op trim: ~0.4 ms)

# Body pieces of one streamed http response handed to the owner and not yet sent on: the
# worker reads no further, and none are handed over while the client's connection is blocked.
HTTP_PIECES_AHEAD = 4
HTTP_RECHECK = 0.05  # seconds between looks at a blocked connection, for a waiting stream

# The pools' shares (`_shares`): fs calls, 8 threads, at most 4 of a connection's at once
# (walks apart: 2, one each); http calls likewise; sandboxes prepared and cleaned up one at a
# time, sessions in turn.
FS_WORKERS, FS_PER_CONNECTION = 8, 4
WALK_WORKERS = 2  # fs/walk: two at once, one of a connection's
HTTP_PER_CONNECTION = 4
PREP_WORKERS = 1

# What ends input on a terminal: closing our copy of the pty would not, as the reader of
# the other side only sees end-of-file when the line discipline gets ^D.
END_OF_TERMINAL_INPUT = b"\x04"

# How long a stop waits, once every process is finalized, for the connections to take what is
# queued for them and their close frames (a client that reads nothing must not hold the server
# up). Also after the core failed.
CLOSE_WAIT = 1.0
# The spawn failures that say the client named a program it cannot run (logged as info).
CLIENTS_SPAWN_FAILURES = ("spawnNotFound", "spawnPermissionDenied")


def _ignore(result: Any) -> None:
    """An http call's work answers for itself, through `post`."""


class CoreFailed(Exception):
    """The server stopped because its core raised (a bug). It is logged with its traceback by
    then, every connection closed (1011) and every process killed; the cause is the core's
    exception."""


class Loop(Protocol):
    """What the driver needs from an event loop. Every callback runs on the owner."""

    def now(self) -> float: ...
    def watch_read(self, fd: int, callback: Callable[[], None]) -> None: ...
    def watch_write(self, fd: int, callback: Callable[[], None]) -> None: ...
    def unwatch_read(self, fd: int) -> None: ...
    def unwatch_write(self, fd: int) -> None: ...
    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` at ``when``; returns a function that cancels it."""
        ...
    def run_blocking(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        """Run ``work`` off the loop; call ``done(result or exception)`` back on the owner."""
        ...
    def post(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the owner soon. Safe from any thread."""
        ...


class Driver:
    """Feeds events to the core and carries out its actions over a `Loop`."""

    def __init__(
        self,
        core: ServerCore | Recorder,
        loop: Loop,
        files: Files | None = None,
        backend: Backend | None = None,
        tune_heap: bool = False,
    ) -> None:
        """``tune_heap``: change glibc's malloc settings for the whole process so output
        buffers stay in the heap (`_posix.keep_buffers_in_heap`), and give free heap memory
        back every TRIM_INTERVAL on the loop. Faster, but not something an embedding host
        expects of a library: ``execproto serve`` turns it on."""
        if tune_heap:
            _posix.keep_buffers_in_heap()
        self.core = core
        self.loop = loop
        self.files = files or Files()
        self.backend: Backend = backend or LocalBackend()
        self._tokens: dict[int, Any] = {}  # proc -> the backend's token, until its finalize
        # proc -> [processId, argv[0], start time, output bytes]: for the exit's log line.
        self._runs: dict[int, list[Any]] = {}
        self._queue: deque[Event] = deque()
        self._busy = False
        self._children: dict[int, _posix.Child] = {}
        self._paused: set[int] = set()
        self._stdin_pending: dict[int, bytearray] = {}
        self._stdin_closing: set[int] = set()
        # http calls in flight: op -> (set to cancel it, whether its body streams)
        self._http: dict[int, tuple[threading.Event, bool]] = {}
        self._http_pool = Shares(loop.post, _http.WORKERS, HTTP_PER_CONNECTION, "execproto-http")
        self.fs_pool = Shares(loop.post, FS_WORKERS, FS_PER_CONNECTION, "execproto-fs")
        # Walks apart, fewer at once: each builds an answer of up to 50,000 entries, and how many
        # run together is how much memory the allocator keeps afterwards.
        self.walk_pool = Shares(loop.post, WALK_WORKERS, 1, "execproto-walk")
        # Sandboxes are set up and cleaned up off the owner: deny patterns alone may look at
        # 50,000 directory entries. Only here, one at a time, as the backend's placeholders
        # are shared by every sandbox.
        self._prep = Shares(loop.post, PREP_WORKERS, 1, "execproto-sandbox")
        self._cleanups = 0  # sandbox finalizes on the pool: the stop waits for them
        self._http_conns: dict[int, int] = {}  # op of a streamed response -> its connection
        self._sent_to: int | None = None  # the connection of the latest Send
        self._cancel_tick: Callable[[], None] | None = None
        self._tick_at: float | None = None
        # Whether a periodic release of free heap memory is scheduled; never without tuning.
        self._trimming = not tune_heap
        self._stopping = False
        self._close_waiting = self._close_waited = False  # see `_check_idle`
        self.on_idle: Callable[[], None] | None = None  # called after a drain leaves it idle
        # What the core raised, after which the driver only stops (see `_core_failed`); the
        # adapter's `on_failure` starts the same stop as SIGTERM does.
        self.failure: BaseException | None = None
        self.on_failure: Callable[[], None] | None = None
        self.peers: dict[int, Peer] = {}  # open connections, by the handle the core knows
        self._conns = 0
        self.watches = Watches(loop, self.feed, self.files.scope)
        # Each process's cgroup (`_cgroups`), so that nothing it starts outlives it.
        self._tree, problem = _cgroups.Tree.create()
        if problem is not None:
            log.warning("a process's descendants that leave its process group are not tracked "
                        "(%s): a terminate, or a server killed, can leave them running", problem)
        self._run: dict[type, Callable[[Any], None]] = {
            Send: self._send,
            CloseConnection: self._close_connection,
            Spawn: self._spawn,
            WriteStdin: self._write_stdin,
            CloseStdin: self._close_stdin,
            Signal: self._signal,
            ResizeTerminal: self._resize,
            PauseOutput: self._pause,
            ResumeOutput: self._resume,
            Finalize: self._finalize,
            RunFs: self._run_fs,
            WatchMissing: self.watches.start,
            Unwatch: self.watches.stop,
            RunHttp: self._run_http,
            CancelHttp: self._cancel_http,
        }

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
                if isinstance(self.core, Recorder) and self.core.sink_failure is not None:
                    self._trace_stopped(self.core)
                for action in actions:
                    try:
                        self._run[type(action)](action)
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
            self.loop.call_at(self.loop.now() + TRIM_INTERVAL, self._trim)
        self._check_idle()

    def _check_idle(self) -> None:
        """Tell `on_idle` once every process is finalized; when stopping, once the connections
        are gone too (what was queued for them sent, and their close frames), or CLOSE_WAIT
        after the processes."""
        if self.on_idle is None or not self.idle:
            return
        if self._stopping and self.peers and not self._close_waited:
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
        return self.core.idle and not self._cleanups

    def _trace_stopped(self, recorder: Recorder) -> None:
        """The trace could not be written: one line says so, and the server goes on."""
        log.error("the trace stopped: writing it failed (%s: %s); the server goes on untraced",
                  type(recorder.sink_failure).__name__, recorder.sink_failure)
        self.core = recorder.core

    def _core_failed(self, event: Event, exc: Exception) -> None:
        """The core raised: its state is unknown and it refuses every further call, so the
        server stops. Nothing it started may outlive it: every process group is killed and
        reaped here, every connection closed; then the adapter stops as on SIGTERM."""
        self.failure = exc
        self._queue.clear()
        log.critical("the server is stopping because its core failed on %s, a bug in execproto;"
                     " every connection is closed and every process killed",
                     type(event).__name__, exc_info=exc)
        if self._cancel_tick is not None:
            self._cancel_tick()
            self._cancel_tick = None
        for peer in list(self.peers.values()):
            peer.close(1011, "internal error")
        for proc, child in list(self._children.items()):
            try:
                child.signal_group("KILL")
            except OSError:
                log.exception("killing process %d failed", proc)
            self._release(proc, child)
            self._tree.signalled(proc, "KILL")
            self._tree.finished(proc)
        self._children.clear()
        self._runs.clear()
        for token in self._tokens.values():
            try:
                self.backend.finalize(token, "failed", None, True)
            except Exception:
                log.exception("the backend's finalize failed")
        self._tokens.clear()
        for cancelled, _ in self._http.values():
            cancelled.set()
        self._http.clear()
        if self._stopping:  # failed while stopping: the stop goes on, with nothing left to do
            self._stop_after_failure()
        if self.on_failure is not None:
            self.on_failure()

    def _stop_after_failure(self) -> None:
        self.loop.call_at(self.loop.now() + CLOSE_WAIT, partial(self._stopped_after_failure, True))
        self._stopped_after_failure()

    def _stopped_after_failure(self, waited: bool = False) -> None:
        """Idle, once stopping, when the last connection is gone (its close frame sent)."""
        if self._stopping and (waited or not self.peers) and self.on_idle is not None:
            self.on_idle()

    def _failed(self, action: Action, exc: Exception) -> None:
        """An action could not be carried out: give the core the answer its request is owed,
        so no id stays taken and no client waits forever. Actions nobody waits on (a signal,
        a pause, stdin) are only logged; the process's own events still come."""
        why = f"{type(exc).__name__}: {exc}"
        if isinstance(action, Spawn) and action.proc not in self._children:
            self._spawn_failed(action, SpawnFailed(proc=action.proc, error=why))
        elif isinstance(action, Spawn):  # spawned, but not watched: it must not run unseen
            self._children[action.proc].signal_group("KILL")
        elif isinstance(action, RunFs):
            self.feed(FsCompleted(op=action.op, error=RpcError(INTERNAL_ERROR, f"failed: {why}")))
        elif isinstance(action, RunHttp):  # whatever its worker may still post is dropped
            self._http.pop(action.op, None)
            self.feed(HttpFinished(op=action.op, error=why))
        elif isinstance(action, (Send, CloseConnection)) and action.conn in self.peers:
            self.peers[action.conn].close(1011, "internal error")

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
        self._cancel_tick = None
        self._tick_at = None
        self.feed(Tick())

    # -- connections ----------------------------------------------------------------------------

    def next_conn(self) -> int:
        self._conns += 1
        return self._conns

    def _send(self, action: Send) -> None:
        self._sent_to = action.conn
        peer = self.peers.get(action.conn)
        if peer is not None:
            peer.send(action.data)

    def connection_blocked(self, conn: int) -> None:
        """Its send buffer is past the high water: none of its fs calls start, as answers
        nobody reads would only pile up in memory."""
        self.fs_pool.hold(conn)
        self.walk_pool.hold(conn)

    def connection_drained(self, conn: int) -> None:
        self.fs_pool.release(conn)
        self.walk_pool.release(conn)

    def connection_gone(self, conn: int) -> None:
        """Its fs and http calls still queued are not run: nobody would read their answers."""
        self.fs_pool.drop(conn)
        self.walk_pool.drop(conn)
        self._http_pool.drop(conn)

    def _close_connection(self, action: CloseConnection) -> None:
        peer = self.peers.get(action.conn)
        if peer is not None:
            peer.close(action.code, action.reason)

    # -- processes ------------------------------------------------------------------------------

    def _spawn(self, action: Spawn) -> None:
        try:
            place = self._tree.place(action.proc)
        except OSError as exc:  # out of cgroups, or of memory
            self._spawn_failed(action, SpawnFailed(proc=action.proc,
                                                   error=_posix.os_error_text(exc)))
            return
        if action.spec.sandbox is None:  # nothing slow to prepare: spawned at once
            self._spawned(action, self._launch(action, place))
            return
        # A sandbox's setup, and the spawn itself (which waits for the child's exec, long on a
        # loaded machine), run off the owner, sessions in turn.
        self._prep.submit(action.spec.session_id, partial(self._launch, action, place),
                          partial(self._spawned, action))

    def _launch(self, action: Spawn, place: str | None) -> tuple[Any, Any]:
        """(the backend's ExecSpec, the child), or the exception instead of either. Touches
        nothing of the driver's: it may run on a worker thread."""
        try:
            prepared = self.backend.prepare(action.spec)
        except Exception as exc:  # noqa: BLE001 - each kind is answered in _prepare_failed
            return exc, None
        spec = attrs.evolve(action.spec, argv=prepared.argv, env=prepared.env, cwd=prepared.cwd,
                            arg0=prepared.arg0)
        try:
            return prepared, _posix.spawn(spec, prepared.pass_fds,
                                          _cgroups.wrapper(place, spec.env))
        except (_posix.SpawnError, OSError) as exc:  # or out of descriptors, memory, cgroups
            return prepared, exc
        finally:
            for fd in prepared.pass_fds:
                _posix.close_quietly(fd)

    def _spawned(self, action: Spawn, launched: tuple[Any, Any]) -> None:
        prepared, child = launched
        if isinstance(prepared, BaseException):
            self._tree.finished(action.proc)
            self._prepare_failed(action, prepared)
            return
        if self.failure is not None:  # the core failed meanwhile: nothing of it may run
            if isinstance(child, _posix.Child):
                child.signal_group("KILL")
                self._release(action.proc, child)
            self._tree.finished(action.proc)
            self._finalize_backend(action.proc, prepared.token, "failed", None, True)
            return
        # From here the backend is owed exactly one finalize, whatever happened to the spawn.
        self._tokens[action.proc] = prepared.token
        if not isinstance(child, _posix.Child):  # the spawn failed
            self._tree.finished(action.proc)
            self._spawn_failed(action, self._spawn_failure(action, prepared, child))
            return
        self._children[action.proc] = child
        request = action.spec
        sandbox = "none" if request.sandbox is None else self.backend.sandbox_type
        log.info("process %s started: pid %d, %s, cwd %s, sandbox %s", request.process_id,
                 child.pid, request.argv[0], request.cwd, sandbox,
                 extra={"fields": {"process": request.process_id, "session": request.session_id,
                                   "pid": child.pid, "program": request.argv[0],
                                   "cwd": request.cwd, "sandbox": sandbox}})
        self._runs[action.proc] = [request.process_id, request.argv[0], self.loop.now(), 0]
        self.feed(ProcessSpawned(proc=action.proc, pid=child.pid))
        self.loop.watch_read(child.pidfd, lambda: self._on_exit(action.proc))
        for stream in child.outputs:
            self._watch_output(action.proc, stream)

    def _spawn_failure(self, action: Spawn, prepared: Any,
                       exc: _posix.SpawnError | OSError) -> SpawnFailed:
        if not isinstance(exc, _posix.SpawnError):  # out of descriptors, memory, cgroups...
            return SpawnFailed(proc=action.proc, error=_posix.os_error_text(exc))
        if prepared.argv[0] != action.spec.argv[0] and os.path.isdir(prepared.cwd):
            # The backend's own command (docker, ssh) is missing: a server problem, not the
            # client's program, so not the client's spawnNotFound either.
            error = f"the backend's command {prepared.argv[0]}: {exc}"
            return SpawnFailed(proc=action.proc, error=error)
        return SpawnFailed(proc=action.proc, error=str(exc), kind=exc.kind)

    def _prepare_failed(self, action: Spawn, exc: BaseException) -> None:
        if isinstance(exc, Refused):
            failed = SpawnFailed(proc=action.proc, error=str(exc), refused=True)
        elif isinstance(exc, _posix.SpawnError):
            failed = SpawnFailed(proc=action.proc, error=str(exc), kind=exc.kind)
        elif isinstance(exc, OSError):  # the sandbox could not be set up
            failed = SpawnFailed(proc=action.proc, error=_posix.os_error_text(exc))
        else:  # a bug in the backend: the start still gets its answer
            log.error("preparing process %d failed", action.proc, exc_info=exc)
            failed = SpawnFailed(proc=action.proc, error=f"{type(exc).__name__}: {exc}")
        self._spawn_failed(action, failed)

    def _spawn_failed(self, action: Spawn, failed: SpawnFailed) -> None:
        """Tell the core, and the operator: a program the client named that is missing or not
        executable is the client's business (info); anything else (a sandbox that cannot be
        enforced, the host out of descriptors or memory, the backend's own command) is the
        operator's (warning)."""
        spec = action.spec
        why = "refused" if failed.refused else failed.kind
        level = logging.INFO if why in CLIENTS_SPAWN_FAILURES else logging.WARNING
        log.log(level, "process %s did not start (%s): %s", spec.process_id, why, failed.error,
                extra={"fields": {"process": spec.process_id, "session": spec.session_id,
                                  "program": spec.argv[0], "cwd": spec.cwd, "failure": why}})
        self.feed(failed)

    def _watch_output(self, proc: int, stream: Stream) -> None:
        fd = self._children[proc].outputs[stream]
        self.loop.watch_read(fd, lambda: self._on_readable(proc, stream))

    def _on_readable(self, proc: int, stream: Stream) -> None:
        child = self._children.get(proc)
        if child is None or stream not in child.outputs:
            return
        self._read_once(proc, child, stream)

    def _read_once(self, proc: int, child: _posix.Child, stream: Stream) -> bool:
        """One read; True if it got data (so the caller may read again)."""
        fd = child.outputs[stream]
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno != errno.EIO:  # EIO: a terminal whose other side is gone, i.e. EOF
                log.warning("reading %s of process %d: %s", stream, proc, exc)
            data = b""
        if data:
            run = self._runs.get(proc)
            if run is not None:
                run[3] += len(data)
            self.feed(OutputReceived(proc=proc, stream=stream, data=data))
            return True
        self.loop.unwatch_read(fd)
        del child.outputs[stream]
        _posix.close_quietly(fd)
        self.feed(StreamClosed(proc=proc, stream=stream))
        return False

    def _on_exit(self, proc: int) -> None:
        child = self._children.get(proc)
        if child is None:
            return
        status = child.exit_status()
        if status is None:
            return
        self.loop.unwatch_read(child.pidfd)
        # What the child wrote before it exited is usually already in the pipes: take it first,
        # so it is sequenced before the exit (a pipe holds at most PIPE_SIZE, so this ends).
        if proc not in self._paused:
            for stream in list(child.outputs):
                budget = _posix.PIPE_SIZE
                while budget > 0 and stream in child.outputs:
                    if not self._read_once(proc, child, stream):
                        break
                    budget -= READ_SIZE
        self.feed(ProcessExited(proc=proc, returncode=status))

    def _signal(self, action: Signal) -> None:
        self._children[action.proc].signal_group(action.signal)
        self._tree.signalled(action.proc, action.signal)

    def _resize(self, action: ResizeTerminal) -> None:
        self._children[action.proc].set_terminal_size(action.rows, action.cols)

    def _pause(self, action: PauseOutput) -> None:
        self._paused.add(action.proc)
        for fd in self._children[action.proc].outputs.values():
            self.loop.unwatch_read(fd)

    def _resume(self, action: ResumeOutput) -> None:
        self._paused.discard(action.proc)
        for stream in self._children[action.proc].outputs:
            self._watch_output(action.proc, stream)

    def _write_stdin(self, action: WriteStdin) -> None:
        child = self._children[action.proc]
        if child.stdin is None:  # closed: the child closed its end, or it was closed on request
            self.feed(StdinWritten(proc=action.proc, size=len(action.data), closed=True))
            return
        pending = self._stdin_pending.get(action.proc)
        if pending is not None:
            pending += action.data
            return
        self._stdin_pending[action.proc] = bytearray(action.data)
        self._flush_stdin(action.proc)

    def _flush_stdin(self, proc: int) -> None:
        child = self._children.get(proc)
        pending = self._stdin_pending.get(proc)
        if child is None or child.stdin is None or pending is None:
            return
        done, broken = 0, False
        try:
            while pending:
                written = os.write(child.stdin, pending)
                del pending[:written]
                done += written
        except BlockingIOError:
            self.loop.watch_write(child.stdin, lambda: self._flush_stdin(proc))
            self._written(proc, done)
            return
        except OSError:  # EPIPE: the child closed its stdin; what is left cannot be delivered
            done += len(pending)
            pending.clear()
            self._stdin_closing.add(proc)
            broken = True
        self.loop.unwatch_write(child.stdin)
        del self._stdin_pending[proc]
        if proc in self._stdin_closing:
            self._stdin_closing.discard(proc)
            if os.isatty(child.stdin):
                try:
                    os.write(child.stdin, END_OF_TERMINAL_INPUT)
                except OSError:
                    pass
            _posix.close_quietly(child.stdin)
            child.stdin = None
        self._written(proc, done, broken)

    def _written(self, proc: int, size: int, closed: bool = False) -> None:
        """Report what reached the pipe (or was dropped), so the core lets the writes waiting
        their turn go on (Config.max_stdin_backlog). Last: the core may write again at once."""
        if size or closed:
            self.feed(StdinWritten(proc=proc, size=size, closed=closed))

    def _close_stdin(self, action: CloseStdin) -> None:
        self._stdin_closing.add(action.proc)
        if action.proc not in self._stdin_pending:
            self._stdin_pending[action.proc] = bytearray()
            self._flush_stdin(action.proc)

    def _finalize(self, action: Finalize) -> None:
        run = self._runs.pop(action.proc, None)
        if run is not None:
            process_id, program, began, size = run
            took = self.loop.now() - began
            log.info("process %s exited: code %s, %.1f s, %d bytes of output, %s", process_id,
                     action.exit_code, took, size, program,
                     extra={"fields": {"process": process_id, "code": action.exit_code,
                                       "seconds": round(took, 3), "bytes": size,
                                       "timed_out": action.timed_out}})
        child = self._children.pop(action.proc, None)
        if child is not None:
            self._release(action.proc, child)
        self._tree.finished(action.proc)  # a terminated process leaves nothing behind
        if action.proc in self._tokens:
            token = self._tokens.pop(action.proc)
            self._finalize_backend(action.proc, token, action.status, action.exit_code,
                                   action.timed_out)

    def _finalize_backend(self, proc: int, token: Any, status: str, exit_code: int | None,
                          timed_out: bool) -> None:
        """The backend's finalize; a sandbox's off the owner, in turn with the preparations
        (its placeholders are theirs too)."""
        def work() -> None:
            self.backend.finalize(token, status, exit_code, timed_out)

        def done(outcome: Any) -> None:
            if isinstance(outcome, BaseException):
                log.error("the backend's finalize failed for process %d", proc, exc_info=outcome)
                if self.failure is None:
                    self.feed(FinalizeFailed(proc=proc,
                                             error=f"{type(outcome).__name__}: {outcome}"))

        def cleaned(outcome: Any) -> None:
            self._cleanups -= 1
            done(outcome)
            if self._stopping:
                self._check_idle()

        if not token:  # nothing of a sandbox to clean up
            try:
                work()
                outcome: Any = None
            except Exception as exc:  # noqa: BLE001 - reported by done
                outcome = exc
            done(outcome)
            return
        self._cleanups += 1
        self._prep.submit(None, work, cleaned)

    def _release(self, proc: int, child: _posix.Child) -> None:
        """Stop watching the child, reap it and close whatever of its pipes is still open."""
        self.loop.unwatch_read(child.pidfd)
        for fd in child.outputs.values():
            self.loop.unwatch_read(fd)
        if child.stdin is not None:
            self.loop.unwatch_write(child.stdin)
        self._paused.discard(proc)
        self._stdin_pending.pop(proc, None)
        self._stdin_closing.discard(proc)
        child.reap()

    # -- services -------------------------------------------------------------------------------

    def _run_fs(self, action: RunFs) -> None:
        def done(outcome: Any) -> None:
            if isinstance(outcome, BaseException):  # a bug in the fs code: say so, keep serving
                log.error("%s failed", action.request.method, exc_info=outcome)
                failed = f"{action.request.method} failed: {outcome}"
                outcome = (None, RpcError(INTERNAL_ERROR, failed))
            result, error = outcome
            self.feed(FsCompleted(op=action.op, result=result, error=error))

        pool = self.walk_pool if action.request.method == "fs/walk" else self.fs_pool
        pool.submit(action.conn, partial(self.files.run, action.conn, action.request), done)

    def _run_http(self, action: RunHttp) -> None:
        request = action.request
        cancelled = threading.Event()
        self._http[action.op] = (cancelled, request.stream_response)
        post, op = self.loop.post, action.op

        credit = threading.Semaphore(HTTP_PIECES_AHEAD)

        def work() -> None:
            # On a worker thread: every event goes back to the owner through `post`, in order.
            try:
                head, pieces = _http.fetch(request, cancelled)
                if not request.stream_response:
                    body = _http.whole(pieces, request.url)
                    post(lambda: self._http_event(HttpResponded(
                        op=op, status=head.status, headers=tuple(head.headers), body=body)))
                    return
                post(lambda: self._http_event(HttpResponded(
                    op=op, status=head.status, headers=tuple(head.headers))))
                for piece in pieces:
                    if piece:
                        while not credit.acquire(timeout=_http.SLICE):
                            if cancelled.is_set():
                                return
                        post(partial(self._http_event, HttpBodyReceived(op=op, data=piece),
                                     credit.release))
                post(lambda: self._http_event(HttpFinished(op=op)))
            except Exception as exc:  # a failure, or a bug: either way the call gets an answer
                if not isinstance(exc, _http.HttpFailure):
                    log.exception("http/request failed")
                why = str(exc)
                post(lambda: self._http_event(HttpFinished(op=op, error=why)))

        self._http_pool.submit(action.conn, work, _ignore)

    def _http_event(self, event: HttpResponded | HttpBodyReceived | HttpFinished,
                    sent: Callable[[], None] | None = None) -> None:
        entry = self._http.get(event.op)
        if entry is None:
            return  # cancelled: its connection closed, and the core has forgotten the call
        streaming = entry[1]
        if isinstance(event, HttpFinished) or (isinstance(event, HttpResponded) and not streaming):
            del self._http[event.op]
            self._http_conns.pop(event.op, None)
        self._sent_to = None
        self.feed(event)
        if isinstance(event, HttpResponded) and streaming and self._sent_to is not None:
            self._http_conns[event.op] = self._sent_to  # where its answer went, and the body
        if sent is not None:
            self._next_piece(event.op, sent)

    def _next_piece(self, op: int, sent: Callable[[], None]) -> None:
        """Let a streamed body's worker hand over another piece, once its client keeps up."""
        peer = self.peers.get(self._http_conns.get(op, -1))
        if peer is not None and peer.stuck and op in self._http:
            self.loop.call_at(self.loop.now() + HTTP_RECHECK, lambda: self._next_piece(op, sent))
        else:
            sent()

    def _cancel_http(self, action: CancelHttp) -> None:
        self._http_conns.pop(action.op, None)
        entry = self._http.pop(action.op, None)
        if entry is not None:
            entry[0].set()

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
        for cancelled, _ in self._http.values():  # calls whose connection has not closed yet
            cancelled.set()

    def close(self) -> None:
        """After the stop: kill whatever the processes left running, and remove their cgroups."""
        self.fs_pool.close()
        self.walk_pool.close()
        self._tree.close()
        self._tree = _cgroups.NoTree()

    def raise_if_failed(self) -> None:
        """After the stop: raise `CoreFailed` if it was the core's failure that stopped it."""
        if self.failure is not None:
            raise CoreFailed(f"the core failed: {type(self.failure).__name__}: "
                             f"{self.failure}") from self.failure
