"""The processes room: every process the server spawned, one record each, from spawn to finalize.

The driver hands it the core's process actions (`Spawn`, `WriteStdin`, `CloseStdin`, `Signal`,
`ResizeTerminal`, `PauseOutput`, `ResumeOutput`, `Finalize`), and it feeds back what the
children do: `ProcessSpawned` or `SpawnFailed`, `OutputReceived` and `StreamClosed` for each
pipe, `ProcessExited`, `StdinWritten`, `FinalizeFailed`. As trio's `Process` owns everything
about one child, this owns everything about them all: the backend's preparation (a sandbox's
off the owner), the cgroup that keeps what a child starts from outliving it, stdin, signals,
pausing and resuming output, the operator's log lines, the backend's finalize, and killing
them all when the core fails. Nothing else keeps anything keyed by process.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from execproto import (
    AnswerProxy,
    CloseStdin,
    EndSession,
    Event,
    Finalize,
    FinalizeFailed,
    OutputReceived,
    PauseOutput,
    ProcessExited,
    ProcessSpawned,
    ProxyAsked,
    ResizeTerminal,
    ResumeOutput,
    Signal,
    Spawn,
    SpawnFailed,
    StdinWritten,
    StreamClosed,
    WriteStdin,
)
from execproto.events import Stream

from .._loop import Loop
from .._proxy import ProxyRoom
from .._shares import Shares
from . import _cgroups, _posix
from ._backend import Backend, Refused

if TYPE_CHECKING:
    from execproto.netproxy import Question

    from ._snapshots import Snapshots

log = logging.getLogger("execproto")

# One read per wakeup per stream: large, so a fast writer costs few events, yet bounded, so one
# busy process cannot hold the loop (the pipe itself holds 1 MiB). A read that came back full
# says the writer is ahead: the next one takes up to BULK_READ_SIZE, until one comes back short.
# Fewer, larger chunks cost less per byte (a stream, 60 interleaved rounds: the server's CPU -7%,
# throughput +8%, each round's median); at 1 MiB the bench client's cost per byte grew more
# than the server's fell. A chunk is at most one read: what a held log may hold past its bound
# before its process is paused, and what a client may receive past its own buffer.
READ_SIZE = 256 << 10
BULK_READ_SIZE = 512 << 10
# Sandboxes are set up and cleaned up off the owner (deny patterns alone may look at 50,000
# directory entries), sessions in turn, one start or cleanup of a session at a time. Several at
# once (the backend's placeholders are safe to share, `_placeholders.Placeholders`): on one worker,
# two sessions of costly starts kept another client's `true` waiting over a minute. With eight,
# four such sessions leave four workers free (bench/attack.py: the probe's p99 0.6 s; with
# four workers, 1.9 s), and past eight another client's start waits at most a start's budget
# (`_bwrap.MAX_SECONDS`). A thread costs little; they contend for the GIL only while busy.
PREP_WORKERS = 8
PREP_PER_SESSION = 1
# What ends input on a terminal: closing our copy of the pty would not, as the reader of
# the other side only sees end-of-file when the line discipline gets ^D.
END_OF_TERMINAL_INPUT = b"\x04"
# The spawn failures that say the client named a program it cannot run (logged as info).
CLIENTS_SPAWN_FAILURES = ("spawnNotFound", "spawnPermissionDenied")


@attrs.define(eq=False)  # never compared: an equality attrs would compile at every start
class Record:
    """One process the backend prepared: owed exactly one finalize of its ``token``; with a
    ``child`` once it runs, until it is finalized."""

    token: Any
    child: _posix.Child | None = None
    process_id: str = ""
    session_id: str = ""  # whose share of the sandbox workers its cleanup takes
    program: str = ""
    began: float = 0.0
    output_bytes: int = 0  # for the exit's log line
    paused: bool = False  # its output is not read (the core's PauseOutput)
    stdin_pending: bytearray | None = None  # given, not yet in the pipe (None: nothing waits)
    stdin_closing: bool = False  # close stdin once what is pending is written
    bulk: set[Stream] = attrs.field(factory=set)  # streams whose last read came back full


def _untracked(problem: str) -> None:
    log.warning("a process's descendants that leave its process group are not tracked (%s): "
                "a terminate, or a server killed, can leave them running", problem)


class Children:
    """The running processes. ``failed`` says whether the core has failed: then nothing that
    comes back from a worker may run, or be fed."""

    def __init__(self, loop: Loop, feed: Callable[[Event], None], backend: Backend,
                 failed: Callable[[], bool]) -> None:
        self.loop = loop
        self._feed = feed
        self.backend = backend
        self.failed = failed
        self._records: dict[int, Record] = {}
        self.prep = Shares(loop.post, PREP_WORKERS, PREP_PER_SESSION, "execproto-sandbox")
        self.cleanups = 0  # sandbox finalizes on the pool: the stop waits for them
        self.on_cleaned: Callable[[], None] | None = None  # after each of those
        # Each process's cgroup (`_cgroups`), so that nothing it starts outlives it; the tree
        # is made at the first process, what would stop it said now.
        self.tree: _cgroups.Later | _cgroups.NoTree = _cgroups.Later(_untracked)
        if (problem := _cgroups.Tree.problem()) is not None:
            _untracked(problem)
            self.tree = _cgroups.NoTree()
        self.run: dict[type, Callable[[Any], None]] = {
            Spawn: self._spawn,
            WriteStdin: self._write_stdin,
            CloseStdin: self._close_stdin,
            Signal: self._signal,
            ResizeTerminal: self._resize,
            PauseOutput: self._pause,
            ResumeOutput: self._resume,
            Finalize: self._finalize,
            EndSession: self._end_session,
            AnswerProxy: self._answer_proxy,
        }
        # Each process's managed network proxy (`SpawnSpec.proxy`): its listeners, served
        # from its spawn to its finalize, asking the core about every connection.
        self.proxy = ProxyRoom(loop, self._ask_proxy)
        # The shell snapshots' captures, and the few kept (`SpawnSpec.snapshot`): made, and
        # its module loaded, at the first start that asks for one (`snapshots`).
        self._snapshots: Snapshots | None = None

    @property
    def snapshots(self) -> Snapshots:
        if self._snapshots is None:
            from ._snapshots import Snapshots  # (~2 ms) not at every start

            self._snapshots = Snapshots(self.loop, self)
        return self._snapshots

    def _running(self, proc: int) -> tuple[Record, _posix.Child]:
        record = self._records[proc]
        assert record.child is not None, f"process {proc} is not running"
        return record, record.child

    # -- the spawn ------------------------------------------------------------------------------

    def _spawn(self, action: Spawn) -> None:
        if action.spec.snapshot is not None:  # run from its scope's snapshot, once there is one
            self.snapshots.prepare(action, self._spawn_now)
            return
        self._spawn_now(action)

    def _spawn_now(self, action: Spawn) -> None:
        try:
            place = self.tree.place(action.proc)
        except OSError as exc:  # out of cgroups, or of memory
            self._spawn_failed(action, SpawnFailed(proc=action.proc,
                                                   error=_posix.os_error_text(exc)))
            return
        if action.spec.sandbox is None:  # nothing slow to prepare: spawned at once
            self._spawned(action, self.launch(action, place))
            return
        # A sandbox's setup, and the spawn itself (which waits for the child's exec, long on a
        # loaded machine), run off the owner, sessions in turn.
        self.prep.submit(action.spec.session_id, lambda: self.launch(action, place),
                          lambda launched: self._spawned(action, launched))

    def launch(self, action: Spawn, place: str | None) -> tuple[Any, Any]:
        """(the backend's ExecSpec, the child), or the exception instead of either. Touches
        nothing of the room's: it may run on a worker thread."""
        try:
            prepared = self.backend.prepare(action.spec)
        except Exception as exc:  # noqa: BLE001 - each kind is answered in _prepare_failed
            return exc, None
        spec = attrs.evolve(action.spec, argv=prepared.argv, env=prepared.env, cwd=prepared.cwd,
                            arg0=prepared.arg0)
        if spec.proxy is not None and getattr(prepared, "listeners", None) is None:
            for fd in prepared.pass_fds:
                _posix.close_quietly(fd)
            return prepared, OSError(errno.EOPNOTSUPP, "the backend launches no managed "
                                     "network proxy, and the request has one")
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
            self.tree.finished(action.proc)
            self._prepare_failed(action, prepared)
            return
        listeners = getattr(prepared, "listeners", None)
        if listeners is not None and (self.failed() or not isinstance(child, _posix.Child)):
            listeners.close()  # nothing will connect to them
        if self.failed():  # the core failed meanwhile: nothing of it may run
            if isinstance(child, _posix.Child):
                child.signal_group("KILL")
                self._release(Record(token=None, child=child))
            self.tree.finished(action.proc)
            self.finalize_backend(action.proc, prepared.token, "failed", None, True,
                                   action.spec.session_id)
            return
        # From here the backend is owed exactly one finalize, whatever happened to the spawn.
        record = self._records[action.proc] = Record(token=prepared.token,
                                                     session_id=action.spec.session_id)
        if not isinstance(child, _posix.Child):  # the spawn failed
            self.tree.finished(action.proc)
            self._spawn_failed(action, self._spawn_failure(action, prepared, child))
            return
        request = action.spec
        record.child, record.process_id, record.program = child, request.process_id, request.argv[0]
        record.began = self.loop.now()
        sandbox = "none" if request.sandbox is None else self.backend.sandbox_type
        log.info("process %s started: pid %d, %s, cwd %s, sandbox %s", request.process_id,
                 child.pid, request.argv[0], request.cwd, sandbox,
                 extra={"fields": {"process": request.process_id, "session": request.session_id,
                                   "pid": child.pid, "program": request.argv[0],
                                   "cwd": request.cwd, "sandbox": sandbox}})
        if listeners is not None:
            self.proxy.listen(action.proc, listeners.http, listeners.socks, listeners.udp,
                              listeners.transparent, listeners.dns,
                              owner=action.spec.session_id,  # shared by session
                              credentials=listeners.credentials)
        self._feed(ProcessSpawned(proc=action.proc, pid=child.pid))
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
        self._feed(failed)

    def spawn_raised(self, action: Spawn, why: str) -> None:
        """Carrying out ``action`` raised (a bug, or the OS saying no): the start gets its
        answer; a child that was spawned but is not watched must not run unseen."""
        record = self._records.get(action.proc)
        if record is not None and record.child is not None:
            record.child.signal_group("KILL")
        else:
            self._spawn_failed(action, SpawnFailed(proc=action.proc, error=why))

    # -- output and the exit --------------------------------------------------------------------

    def _watch_output(self, proc: int, stream: Stream) -> None:
        _, child = self._running(proc)
        self.loop.watch_read(child.outputs[stream], lambda: self._on_readable(proc, stream))

    def _on_readable(self, proc: int, stream: Stream) -> None:
        record = self._records.get(proc)
        if record is None or record.child is None or stream not in record.child.outputs:
            return
        self._read_once(proc, record, stream)

    def _read_once(self, proc: int, record: Record, stream: Stream) -> bool:
        """One read; True if it got data (so the caller may read again)."""
        child = record.child
        assert child is not None
        fd = child.outputs[stream]
        bulk = record.bulk
        size = BULK_READ_SIZE if stream in bulk else READ_SIZE
        try:
            data = os.read(fd, size)
        except BlockingIOError:
            bulk.discard(stream)
            return False
        except OSError as exc:
            if exc.errno != errno.EIO:  # EIO: a terminal whose other side is gone, i.e. EOF
                log.warning("reading %s of process %d: %s", stream, proc, exc)
            data = b""
        got = len(data)
        if got:
            if got == size:
                bulk.add(stream)
            else:
                bulk.discard(stream)
            record.output_bytes += got
            self._feed(OutputReceived(proc=proc, stream=stream, data=data))
            return True
        self.loop.unwatch_read(fd)
        del child.outputs[stream]
        _posix.close_quietly(fd)
        self._feed(StreamClosed(proc=proc, stream=stream))
        return False

    def _on_exit(self, proc: int) -> None:
        record = self._records.get(proc)
        child = record.child if record is not None else None
        if record is None or child is None:
            return
        status = child.exit_status()
        if status is None:
            return
        self.loop.unwatch_read(child.pidfd)
        # What the child wrote before it exited is usually already in the pipes: take it first,
        # so it is sequenced before the exit (a pipe holds at most PIPE_SIZE, so this ends).
        if not record.paused:
            for stream in list(child.outputs):
                budget = _posix.PIPE_SIZE
                while budget > 0 and stream in child.outputs:
                    if not self._read_once(proc, record, stream):
                        break
                    budget -= READ_SIZE
        self._feed(ProcessExited(proc=proc, returncode=status))

    # -- signals, the terminal, pausing ---------------------------------------------------------

    def _signal(self, action: Signal) -> None:
        self._running(action.proc)[1].signal_group(action.signal)
        self.tree.signalled(action.proc, action.signal)

    def _resize(self, action: ResizeTerminal) -> None:
        self._running(action.proc)[1].set_terminal_size(action.rows, action.cols)

    def _pause(self, action: PauseOutput) -> None:
        record, child = self._running(action.proc)
        record.paused = True
        for fd in child.outputs.values():
            self.loop.unwatch_read(fd)

    def _resume(self, action: ResumeOutput) -> None:
        record, child = self._running(action.proc)
        record.paused = False
        for stream in child.outputs:
            self._watch_output(action.proc, stream)

    # -- stdin ----------------------------------------------------------------------------------

    def _write_stdin(self, action: WriteStdin) -> None:
        record, child = self._running(action.proc)
        if child.stdin is None:  # closed: the child closed its end, or it was closed on request
            self._feed(StdinWritten(proc=action.proc, size=len(action.data), closed=True))
            return
        if record.stdin_pending is not None:
            record.stdin_pending += action.data
            return
        record.stdin_pending = bytearray(action.data)
        self._flush_stdin(action.proc)

    def _flush_stdin(self, proc: int) -> None:
        record = self._records.get(proc)
        child = record.child if record is not None else None
        if record is None or child is None or child.stdin is None:
            return
        pending = record.stdin_pending
        if pending is None:
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
            record.stdin_closing = True
            broken = True
        self.loop.unwatch_write(child.stdin)
        record.stdin_pending = None
        if record.stdin_closing:
            record.stdin_closing = False
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
            self._feed(StdinWritten(proc=proc, size=size, closed=closed))

    def _close_stdin(self, action: CloseStdin) -> None:
        record, _ = self._running(action.proc)
        record.stdin_closing = True
        if record.stdin_pending is None:
            record.stdin_pending = bytearray()
            self._flush_stdin(action.proc)

    # -- the end --------------------------------------------------------------------------------

    def _finalize(self, action: Finalize) -> None:
        record = self._records.pop(action.proc, None)
        if record is not None and record.child is not None:
            took = self.loop.now() - record.began
            log.info("process %s exited: code %s, %.1f s, %d bytes of output, %s",
                     record.process_id, action.exit_code, took, record.output_bytes,
                     record.program,
                     extra={"fields": {"process": record.process_id, "code": action.exit_code,
                                       "seconds": round(took, 3), "bytes": record.output_bytes,
                                       "timed_out": action.timed_out}})
            self._release(record)
        self.tree.finished(action.proc)  # a terminated process leaves nothing behind
        self.proxy.close(action.proc)
        if record is not None:
            self.finalize_backend(action.proc, record.token, action.status, action.exit_code,
                                  action.timed_out, record.session_id)

    def finalize_backend(self, proc: int, token: Any, status: str, exit_code: int | None,
                         timed_out: bool, session_id: str, report: bool = True) -> None:
        """The backend's finalize; a sandbox's off the owner, in its session's share: a
        session's cleanups take turns with its own starts, not everyone's. A failure is the
        core's to hear (``report``) only for a process of the core's (not a snapshot's
        capture)."""
        def work() -> None:
            self.backend.finalize(token, status, exit_code, timed_out)

        def done(outcome: Any) -> None:
            if isinstance(outcome, BaseException):
                log.error("the backend's finalize failed for process %d", proc, exc_info=outcome)
                if report and not self.failed():
                    self._feed(FinalizeFailed(proc=proc,
                                              error=f"{type(outcome).__name__}: {outcome}"))

        def cleaned(outcome: Any) -> None:
            self.cleanups -= 1
            done(outcome)
            if self.on_cleaned is not None:
                self.on_cleaned()

        if not token:  # nothing of a sandbox to clean up
            try:
                work()
                outcome: Any = None
            except Exception as exc:  # noqa: BLE001 - reported by done
                outcome = exc
            done(outcome)
            return
        self.cleanups += 1
        self.prep.submit(session_id, work, cleaned)

    def _release(self, record: Record) -> None:
        """Stop watching the child, reap it and close whatever of its pipes is still open."""
        child = record.child
        assert child is not None
        self.loop.unwatch_read(child.pidfd)
        for fd in child.outputs.values():
            self.loop.unwatch_read(fd)
        if child.stdin is not None:
            self.loop.unwatch_write(child.stdin)
        record.paused, record.stdin_pending, record.stdin_closing = False, None, False
        child.reap()

    def _ask_proxy(self, proc: int, ask: int, question: Question) -> None:
        if not self.failed():
            self._feed(ProxyAsked(proc=proc, ask=ask, question=question, wall=time.time()))

    def _answer_proxy(self, action: AnswerProxy) -> None:
        refusal = action.refusal
        self.proxy.answer(action.ask, action.allow,
                          None if refusal is None else (refusal[0], list(refusal[1]), refusal[2]),
                          action.socks_code)

    def _end_session(self, action: EndSession) -> None:
        """What the backend keeps for the session (its network) goes: the backend lets go of
        it at once, and what blocks (waiting for a holder to exit) runs off the owner, after
        the session's starts still being prepared (its share runs them in turn). Most
        sessions kept nothing, and wake no worker."""
        running = [record.process_id for record in self._records.values()
                   if record.session_id == action.session_id and record.child is not None]
        # The core has just told these to stop: without this line, an operator saw processes
        # end with no word of why.
        why = "ended by its client" if action.ended else "expired (its client did not resume it)"
        log.info("session %s %s: %d of its processes are terminated%s", action.session_id, why,
                 len(running), f" ({', '.join(running)})" if running else "",
                 extra={"fields": {"session": action.session_id, "terminated": running,
                                   "ended": action.ended}})
        if self._snapshots is not None:
            self._snapshots.forget(action.session_id)
        end = getattr(self.backend, "end_session", None)
        rest = end(action.session_id) if end is not None else None
        if rest is None:
            return

        def cleaned(outcome: Any) -> None:
            self.cleanups -= 1
            if isinstance(outcome, BaseException):
                log.error("ending session %s's sandbox network failed", action.session_id,
                          exc_info=outcome)
            if self.on_cleaned is not None:
                self.on_cleaned()

        self.cleanups += 1
        self.prep.submit(action.session_id, rest, cleaned)

    def stopping(self) -> None:
        """The server stops: a shell snapshot's capture must not hold the stop for its time."""
        if self._snapshots is not None:
            self._snapshots.stop_all()

    def kill_all(self) -> None:
        """The core failed: nothing it started may outlive it. Every process group is killed
        and reaped, and every backend token finalized as failed."""
        if self._snapshots is not None:
            self._snapshots.kill_all()
        self.proxy.close_all()
        for proc, record in list(self._records.items()):
            if record.child is None:
                continue
            try:
                record.child.signal_group("KILL")
            except OSError:
                log.exception("killing process %d failed", proc)
            self._release(record)
            self.tree.signalled(proc, "KILL")
            self.tree.finished(proc)
        for record in self._records.values():
            try:
                self.backend.finalize(record.token, "failed", None, True)
            except Exception:
                log.exception("the backend's finalize failed")
        self._records.clear()

    def close(self) -> None:
        """After the stop: kill whatever the processes left running, remove their cgroups,
        and let the backend release what it keeps (the sessions' networks)."""
        self.tree.close()
        self.tree = _cgroups.NoTree()
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
