"""The ``process/*`` methods and the process events.

The handlers parse, answer and emit; `_lifecycle` decides every transition and its follow-ups,
which `_carry_out` performs in order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs

from . import _descriptors, _params, _sandbox, _shares
from ._env import child_environment, login_shell
from ._errors import (
    LocalProtocolError,
    RpcError,
    internal_error,
    invalid_params,
    invalid_request,
)
from ._jsonrpc import Id
from ._lifecycle import (
    Do,
    Phase,
    Stop,
    StopInput,
    Timer,
    cap_crossed,
    pause_wanted,
    read_ready,
    releases_on_read,
)
from ._policy import Policy, narrow
from ._process import Process
from ._session import Connection, PendingRead, Session
from ._state import CoreState
from .actions import (
    CloseStdin,
    Finalize,
    PauseOutput,
    ResizeTerminal,
    ResumeOutput,
    Send,
    Signal,
    Spawn,
    SpawnSpec,
    WriteStdin,
)
from .events import (
    FinalizeFailed,
    OutputReceived,
    ProcessExited,
    ProcessSpawned,
    SpawnFailed,
    StdinWritten,
    StreamClosed,
)

if TYPE_CHECKING:
    from . import _netproxy

ABANDONED = "output pipes abandoned: a descendant kept them open after the process was terminated"
RECLAIMED = ("terminated while its session was detached: the server was full, and another "
             "client needed room")


def _sandbox_type(core: CoreState, process: Process) -> str:
    # Only ever a value the client can read; "none" means what it says.
    return core.config.sandbox_type if process.sandboxed else "none"


def unknown_process(process_id: str) -> RpcError:
    return invalid_request(f"unknown process id {process_id}")


class ProcessHandlers(CoreState):
    # -- methods ------------------------------------------------------------------------------

    def _process_start(
        self, c: Connection, session: Session, msg_id: Id, p: _params.StartParams
    ) -> None:
        if self._draining:
            raise invalid_request("the server is draining before it stops: it starts no new "
                                  "processes (those running go on until they finish)")
        if p.process_id in session.processes:
            raise invalid_request(f"process {p.process_id} already exists")
        self._check_process_limits(session)
        shell = login_shell(self.host.environment_info) if p.tty else None
        env = child_environment(self.host.env, p.env, p.env_policy, terminal_shell=shell)
        sandbox = self._sandbox_for(p, env)
        launch = self._proxy_launch(p, sandbox)
        if launch is not None and sandbox is not None and (
                self.config.floor is None or self.config.floor.network):
            # The proxy is the sandbox's network, all of it (the operator's floor allowing).
            sandbox = attrs.evolve(sandbox, network=True)
        handle = self._next_proc
        self._next_proc += 1
        process = Process(
            handle,
            p.process_id,
            session,
            tty=p.tty,
            pipe_stdin=p.pipe_stdin,
            retention_bytes=self.config.retention_bytes,
            retention_chunks=self.config.retention_chunks,
            sandboxed=sandbox is not None,
            b64encode=self.config.b64encode,
        )
        if session.acks:
            process.hold()
        session.processes[p.process_id] = process
        self._procs[handle] = process
        c.starts[handle] = msg_id
        snapshot = None
        if p.shell_snapshot is not None:  # its module was loaded by the start's parse
            from . import _snapshot

            snapshot = _snapshot.for_start(
                p.shell_snapshot, session_id=session.session_id, cwd=p.cwd, env=p.env,
                env_policy=p.env_policy, sandbox=sandbox, proxied=launch is not None)
        spec = SpawnSpec(
            argv=p.argv,
            arg0=p.arg0,
            cwd=p.cwd,
            env=tuple(env.items()),
            tty=p.tty,
            pipe_stdin=p.pipe_stdin,
            session_id=session.session_id,
            process_id=p.process_id,
            sandbox=sandbox,
            terminal_size=p.terminal_size,
            proxy=launch.proxy if launch is not None else None,
            snapshot=snapshot,
        )
        if launch is not None:
            self._launches[handle] = launch
        self._emit(Spawn(proc=handle, spec=spec))

    def _check_process_limits(self, session: Session) -> None:
        live = sum(1 for process in session.processes.values() if process.proc in self._procs)
        if live >= self.config.max_session_processes:
            raise invalid_request(
                f"too many processes: a session runs at most {self.config.max_session_processes} "
                "at once; wait for some to close"
            )
        counted = [p for p in self._procs.values() if p.proc not in self._reclaimed]
        held = _shares.count(p.session.keys for p in counted)
        share = _shares.process_share(self.config)
        for key in session.keys:
            if held[key] >= share:
                raise invalid_request(
                    f"too many processes: one {key[0]} runs at most {share} of the server's "
                    f"{self.config.max_processes} at once; wait for some to close")
        self._check_descriptors(_descriptors.PER_PROCESS)
        # Last: nothing is taken from another client for a start refused all the same.
        if len(counted) >= self.config.max_processes and not self._reclaim(session, held):
            raise invalid_request(
                f"too many processes: this server runs at most {self.config.max_processes} "
                "at once; wait for some to close"
            )

    def _reclaim(self, session: Session, held: Counter[_shares.Key]) -> bool:
        """The server is full: a client that left holds no more of it than the one asking.
        The key holding the most that has processes in detached sessions, if it holds more
        than the asker's key of its kind, has its oldest such process terminated (it stops
        counting now, though it takes up to two ``kill_grace`` to go)."""
        detached = [p for p in self._procs.values() if p.session.conn is None
                    and p.proc not in self._reclaimed and p.life.stop is Stop.NONE]
        candidates = dict.fromkeys(key for p in detached for key in p.session.keys)
        key = _shares.yielding(held, session.keys, candidates)
        if key is None:
            return False
        oldest = next(p for p in detached if key in p.session.keys)  # by handle: started first
        self._reclaimed.add(oldest.proc)
        oldest.timed_out = True
        oldest.failure = RECLAIMED
        self._terminate(oldest)
        return True

    def _sandbox_for(self, p: _params.StartParams, env: dict[str, str]) -> Policy | None:
        """The client's sandbox narrowed by the operator's floor; -32602 if nothing here can
        enforce the result (fail closed: the process does not run unconfined)."""
        cwd = p.sandbox.cwd if p.sandbox is not None and p.sandbox.cwd is not None else p.cwd
        asked = _sandbox.policy(p.sandbox, cwd, env.get("TMPDIR"))
        policy = narrow(self.config.floor, asked, self.config.secrets, self.config.protected)
        if policy is not None and self.config.sandbox_type == "none":
            raise invalid_params(_sandbox.CANNOT_ENFORCE)
        return policy

    def _proxy_launch(self, p: _params.StartParams,
                      sandbox: Policy | None) -> _netproxy.ProxyLaunch | None:
        """The managed network proxy to launch (``networkProxy``), checked as the reference
        checks it. Managed networking enforced on a sandbox with the network but no proxy to
        enforce it with fails closed (-32602), before anything runs."""
        if p.network_proxy is None and p.managed_network is None:
            if p.enforce_managed_network and sandbox is not None and sandbox.network:
                raise invalid_params(f"{_sandbox.CANNOT_ENFORCE}: managed networking is "
                                     "enforced, and no networkProxy says how")
            return None
        # The proxy's policy and parameters (and credential masking's) are loaded here, at the
        # first start that asks for a proxy: no server's start pays for them.
        from . import _netproxy, _netproxy_params

        managed = _netproxy_params.parse_managed(p.managed_network)
        if p.network_proxy is None:
            if managed is not None and managed.transparent_tcp:
                raise invalid_params(_netproxy.MANAGED_TRANSPARENT_TCP)
            if p.enforce_managed_network and sandbox is not None and sandbox.network:
                raise invalid_params(f"{_sandbox.CANNOT_ENFORCE}: managed networking is "
                                     "enforced, and no networkProxy says how")
            return None
        linux_sandbox = sandbox is not None and self.config.sandbox_type == "linuxSeccomp"
        launch = _netproxy_params.parse_launch(p.network_proxy,
                                               managed_linux_sandbox=linux_sandbox)
        if launch.proxy.transparent_tcp or (managed is not None and managed.transparent_tcp):
            if not launch.proxy.enable_socks5:  # the reference's check, and words
                raise invalid_params(_netproxy.TRANSPARENT_TCP_SOCKS5)
            capabilities = self.host.environment_info.get("capabilities", {})
            if not capabilities.get("networkProxyTransparentTcp"):
                raise invalid_params(f"{_sandbox.CANNOT_ENFORCE}: transparent TCP is not "
                                     "supported here (networkProxyTransparentTcp is false)")
            if not launch.proxy.transparent_tcp:  # asked for in managedNetwork only
                launch = attrs.evolve(launch, proxy=attrs.evolve(launch.proxy,
                                                                 transparent_tcp=True))
        return launch

    def _process_read(
        self, c: Connection, session: Session, msg_id: Id, p: _params.ReadParams
    ) -> None:
        process = session.processes.get(p.process_id)
        if process is None:
            raise unknown_process(p.process_id)
        if p.wait_ms == 0 or read_ready(process, p.after_seq):
            self._answer_read(c.conn, msg_id, process, p.after_seq, p.max_bytes)
            return
        token = self._next_token
        self._next_token += 1
        read = PendingRead(token, c.conn, msg_id, process, p.after_seq, p.max_bytes)
        process.readers[token] = read
        c.reads[token] = read
        self._set_timer((Timer.READ, read), p.wait_ms / 1000)

    def _process_ack(
        self, c: Connection, session: Session, msg_id: Id, p: _params.AckParams
    ) -> None:
        process = session.processes.get(p.process_id)
        # An unknown process is no error: an ack may race the process's eviction.
        if process is not None:
            process.log.discard_through(p.seq)
            self._sync_paused(process)
        self._respond(c.conn, msg_id, {})

    def _process_write(
        self, c: Connection, session: Session, msg_id: Id, p: _params.WriteParams
    ) -> None:
        process = session.processes.get(p.process_id)
        if process is None:
            status = "unknownProcess"
        elif process.life.phase is Phase.STARTING:
            status = "starting"
        elif p.write_id in process.write_ids:
            status = "accepted"  # a retry of a write already done, or waiting its turn
        elif not process.stdin_open:
            status = "stdinClosed"
        elif process.stdin_waiting or (process.stdin_queued and process.stdin_queued + len(
                p.chunk) > self.config.max_stdin_backlog):
            self._write_later(c, msg_id, process, p)
            return
        else:
            self._deliver_write(process, p)
            status = "accepted"
        self._respond(c.conn, msg_id, {"status": status})

    def _write_later(
        self, c: Connection, msg_id: Id, process: Process, p: _params.WriteParams
    ) -> None:
        """The process has not read what it was given: the write waits, unanswered, as the
        reference's does, so a client that waits for answers goes at the process's pace. Only
        so much may wait, per process and in all; past that the write is refused."""
        size = len(p.chunk)
        cap = self.config.max_stdin_backlog
        if process.stdin_waiting and process.stdin_waiting_bytes + size > cap:
            raise invalid_request(
                f"process {p.process_id} is not reading its stdin: {process.stdin_queued} "
                f"bytes wait for it and {process.stdin_waiting_bytes} more to be written; "
                "write again once it reads")
        if self._stdin_total + size > self.config.max_stdin_total:
            raise invalid_request(
                "too much stdin waiting for processes to read it, on this server: write again "
                "once they read")
        process.remember_write(p.write_id, self.config.write_id_memory)
        if p.close_stdin:
            process.stdin_open = False  # promised: later writes find it closed
        process.stdin_waiting.append((c.conn, msg_id, p))
        process.stdin_waiting_bytes += size
        self._stdin_total += size

    def _deliver_write(self, process: Process, p: _params.WriteParams) -> None:
        process.remember_write(p.write_id, self.config.write_id_memory)
        if p.chunk:
            process.stdin_queued += len(p.chunk)
            self._stdin_total += len(p.chunk)
            self._emit(WriteStdin(proc=process.proc, data=p.chunk))
        if p.close_stdin:
            process.stdin_open = False
            self._emit(CloseStdin(proc=process.proc))

    def _on_stdin_written(self, event: StdinWritten) -> None:
        process = self._live_process(event.proc)
        if process is None or process.life.phase is not Phase.RUNNING:
            return  # after the exit what was queued no longer counts (`_drop_stdin`)
        if not 0 <= event.size <= process.stdin_queued:
            raise LocalProtocolError(
                f"process {process.proc}: {event.size} bytes of stdin reported written, of "
                f"{process.stdin_queued} asked for")
        process.stdin_queued -= event.size
        self._stdin_total -= event.size
        if event.closed:  # the process closed its end: what waits can never be written
            process.stdin_open = False
            self._drop_stdin(process)
            return
        cap = self.config.max_stdin_backlog
        while process.stdin_waiting:
            conn, msg_id, p = process.stdin_waiting[0]
            if process.stdin_queued and process.stdin_queued + len(p.chunk) > cap:
                break
            process.stdin_waiting.popleft()
            process.stdin_waiting_bytes -= len(p.chunk)
            self._stdin_total -= len(p.chunk)
            self._deliver_write(process, p)
            if conn in self._conns:  # else its client reads the answer of a retry instead
                self._respond(conn, msg_id, {"status": "accepted"})

    def _drop_stdin(self, process: Process) -> None:
        """Stdin closed (the exit, or the process closed its end): what waits is answered
        ``stdinClosed``; what was asked for and not reported written no longer counts (the
        adapter drops it)."""
        for conn, msg_id, _ in process.stdin_waiting:
            if conn in self._conns:
                self._respond(conn, msg_id, {"status": "stdinClosed"})
        process.stdin_waiting.clear()
        self._stdin_total -= process.stdin_waiting_bytes + process.stdin_queued
        process.stdin_waiting_bytes = process.stdin_queued = 0

    def _process_signal(
        self, c: Connection, session: Session, msg_id: Id, p: _params.SignalParams
    ) -> None:
        process = session.processes.get(p.process_id)
        # Unknown, not yet spawned, or already exited: nothing to signal, and no error, so a
        # client racing the exit does not see a failure it cannot act on.
        if process is not None and process.may_signal:
            self._emit(Signal(proc=process.proc, signal=p.signal))
        self._respond(c.conn, msg_id, {})

    def _process_resize(
        self, c: Connection, session: Session, msg_id: Id, p: _params.ResizeParams
    ) -> None:
        """execproto's extension. Unknown is an error, as for a read (the client asks of a
        process it believes is there); so is a process without a terminal. Exited: nothing to
        resize and no error, as for a signal, so a client racing the exit sees no failure."""
        process = session.processes.get(p.process_id)
        if process is None:
            raise unknown_process(p.process_id)
        if not process.tty:
            raise invalid_request(
                f"process {p.process_id} has no terminal: it was started without tty")
        if process.life.phase is Phase.STARTING:
            process.pending_size = (p.rows, p.cols)  # applied at the spawn (`_apply_size`)
        elif process.may_resize:
            self._emit(ResizeTerminal(proc=process.proc, rows=p.rows, cols=p.cols))
        self._respond(c.conn, msg_id, {})

    def _process_terminate(
        self, c: Connection, session: Session, msg_id: Id, process_id: str
    ) -> None:
        process = session.processes.get(process_id)
        running = process is not None and process.is_running
        if process is not None:
            self._terminate(process)
        self._respond(c.conn, msg_id, {"running": running})

    def _terminate(self, process: Process) -> None:
        """Stop a process: TERM now, KILL after the grace; give up held pipes after another."""
        self._carry_out(process, process.life.stop_event(StopInput.TERMINATE))

    # -- events ---------------------------------------------------------------------------------

    def _on_spawned(self, event: ProcessSpawned) -> None:
        process = self._live_process(event.proc)
        if process is None:
            return
        todo = process.life.spawned()
        self.stats.process_spawned(process.proc, self._now)
        c = self._start_conn(process)
        if c is not None:
            self._respond(
                c.conn,
                c.starts.pop(process.proc),
                {"processId": process.process_id, "sandboxType": _sandbox_type(self, process)},
            )
        self._carry_out(process, todo)

    def _on_spawn_failed(self, event: SpawnFailed) -> None:
        process = self._live_process(event.proc)
        if process is None:
            return
        todo = process.life.spawn_failed()
        c = self._start_conn(process)
        if c is not None:
            if event.refused:
                error = invalid_params(event.error)
            else:
                error = internal_error(event.error, {"kind": event.kind})
            self._fail(c.conn, c.starts.pop(process.proc), error)
        self._carry_out(process, todo)

    def _on_output(self, event: OutputReceived) -> None:
        # The hot path: once per chunk. The rules it applies are `_lifecycle`'s, inline where
        # they cost nothing unless a process is held or read.
        process = self._live_process(event.proc)
        if process is None:
            return
        data = process.output(event.stream, event.data)
        self.stats.output_bytes += len(event.data)
        conn = process.session.conn
        if conn is not None and data is not None:
            self._actions.append(Send(conn=conn, data=data))
        life = process.life
        if life.held and conn is None and data is not None:
            before = self._held_bytes
            self._held_bytes += len(event.data)
            if cap_crossed(before, self._held_bytes, self.config.max_held_bytes):
                self._sync_held()  # every detached process waits
        if life.held and not life.paused and process.log.full:
            self._sync_paused(process)
        if process.readers:
            self._wake_readers(process)

    def _on_stream_closed(self, event: StreamClosed) -> None:
        process = self._live_process(event.proc)
        if process is not None:
            self._carry_out(process, process.life.close_stream(event.stream))

    def _on_exited(self, event: ProcessExited) -> None:
        process = self._live_process(event.proc)
        if process is None:
            return
        todo = process.exited(event.returncode)
        self._drop_stdin(process)
        self._notify(
            process.session,
            "process/exited",
            {
                "processId": process.process_id,
                "seq": process.take_seq(),
                "exitCode": process.exit_code,
                "sandboxDenied": process.sandbox_denied,
            },
        )
        self._carry_out(process, todo)

    def _on_finalize_failed(self, event: FinalizeFailed) -> None:
        process = self._finalized.get(event.proc)
        if process is None:
            self._live_process(event.proc)  # raises for a handle never issued
            return  # a spawn that failed, or evicted since: nobody can read it any more
        process.failure = f"finalize failed: {event.error}"

    # -- deadlines ------------------------------------------------------------------------------

    def _on_kill_due(self, proc: int) -> None:
        process = self._procs.get(proc)
        if process is not None:
            self._carry_out(process, process.life.stop_event(StopInput.KILL_DUE))

    def _on_abandon_due(self, proc: int) -> None:
        process = self._procs.get(proc)
        if process is not None:
            self._carry_out(process, process.abandon_streams(ABANDONED))

    def _on_evict_due(self, process: Process) -> None:
        self._finalized.pop(process.proc, None)
        self._closed_total -= self._closed_bytes.pop(process.proc, 0)
        # Now, not when the timers let go of it: an early eviction's cancelled deadline keeps
        # the process (and so its log) until closed_ttl.
        process.log.forget()
        if process.session.processes.get(process.process_id) is process:
            del process.session.processes[process.process_id]

    def _on_read_due(self, read: PendingRead) -> None:
        self._cancel_read(read)
        self._answer_read(read.conn, read.id, read.process, read.after_seq, read.max_bytes)

    # -- follow-ups -----------------------------------------------------------------------------

    def _carry_out(self, process: Process, todo: Iterable[Do]) -> None:
        """Perform a transition's follow-ups for ``process``, in the lifecycle's order."""
        for do in todo:
            _FOLLOW_UPS[do](self, process)

    def _settle(self, process: Process) -> None:
        self._carry_out(process, process.life.settle())

    def _signal_term(self, process: Process) -> None:
        self._emit(Signal(proc=process.proc, signal="TERM"))

    def _signal_kill(self, process: Process) -> None:
        process.timed_out = True
        self._emit(Signal(proc=process.proc, signal="KILL"))

    def _set_kill(self, process: Process) -> None:
        self._set_timer((Timer.KILL, process.proc), self.config.kill_grace)

    def _cancel_kill(self, process: Process) -> None:
        self._timers.cancel((Timer.KILL, process.proc))

    def _set_abandon(self, process: Process) -> None:
        self._set_timer((Timer.ABANDON, process.proc), self.config.kill_grace)

    def _cancel_abandon(self, process: Process) -> None:
        self._timers.cancel((Timer.ABANDON, process.proc))

    def _set_evict(self, process: Process) -> None:
        self._set_timer((Timer.EVICT, process), self.config.closed_ttl)

    def _apply_size(self, process: Process) -> None:
        if process.pending_size is not None and process.may_resize:
            rows, cols = process.pending_size
            self._emit(ResizeTerminal(proc=process.proc, rows=rows, cols=cols))
        process.pending_size = None

    def _release_hold(self, process: Process) -> None:
        if process.life.held:
            process.release()
            self._sync_paused(process)
            self._sync_held()

    def _notify_closed(self, process: Process) -> None:
        self._notify(
            process.session,
            "process/closed",
            {"processId": process.process_id, "seq": process.take_seq()},
        )

    def _retire(self, process: Process) -> None:
        del self._procs[process.proc]
        self._launches.pop(process.proc, None)  # its proxy is closed: asks of it find it gone
        self._reclaimed.discard(process.proc)
        self._finalized[process.proc] = process
        kept = process.log.retained_bytes
        self._closed_bytes[process.proc] = kept
        self._closed_total += kept
        # Past the bound, the processes closed longest ago stop being readable early: their
        # output cannot be how a client that never reads fills the memory (1,500 such in 9 s
        # kept 1.5 GB). The one just closed always stays.
        while self._closed_total > self.config.max_closed_bytes and len(self._finalized) > 1:
            oldest = next(iter(self._finalized.values()))
            self._timers.cancel((Timer.EVICT, oldest))
            self._on_evict_due(oldest)

    def _recount_if_held(self, process: Process) -> None:
        if process.life.held and process.session.conn is None:
            self._sync_held()

    def _finalize(self, process: Process) -> None:
        result = ("timed_out" if process.timed_out
                  else "success" if process.exit_code == 0 else "failure")
        self.stats.process_finished(process.proc, result, self._now)
        self._emit(
            Finalize(
                proc=process.proc,
                status="completed",
                exit_code=process.exit_code,
                timed_out=process.timed_out,
            )
        )

    def _forget(self, process: Process) -> None:
        del self._procs[process.proc]
        self._launches.pop(process.proc, None)
        self._reclaimed.discard(process.proc)
        del process.session.processes[process.process_id]  # the id is free again at once

    def _fail_readers(self, process: Process) -> None:
        for read in list(process.readers.values()):
            self._cancel_read(read)
            self._fail(read.conn, read.id, unknown_process(process.process_id))

    def _finalize_failed(self, process: Process) -> None:
        self.stats.process_finished(process.proc, "spawn_failed", self._now)
        self._emit(Finalize(proc=process.proc, status="failed", exit_code=None, timed_out=False))

    # -- helpers --------------------------------------------------------------------------------

    def _start_conn(self, process: Process) -> Connection | None:
        """The connection still waiting for this process's start answer, if any."""
        conn = process.session.conn
        if conn is None:
            return None
        c = self._conns[conn]
        return c if process.proc in c.starts else None

    def _wake_readers(self, process: Process) -> None:
        for read in list(process.readers.values()):
            if read_ready(process, read.after_seq):
                self._cancel_read(read)
                self._answer_read(read.conn, read.id, process, read.after_seq, read.max_bytes)

    def _answer_read(
        self, conn: int, msg_id: Id, process: Process, after_seq: int, max_bytes: int | None
    ) -> None:
        result, truncated = _read_result(process, after_seq, max_bytes)
        self._respond(conn, msg_id, result)
        if releases_on_read(process, truncated):
            process.release()
            self._sync_paused(process)

    def _cancel_read(self, read: PendingRead) -> None:
        del read.process.readers[read.token]
        del self._conns[read.conn].reads[read.token]
        self._timers.cancel((Timer.READ, read))

    def _sync_paused(self, process: Process) -> None:
        """Pause a process's output while its client is blocked, or while its held log is full;
        resume it otherwise."""
        # Only spawned, unfinalized processes have pipes to pause; a process still starting is
        # synced when its spawn is reported.
        if process.proc not in self._procs or process.life.phase is Phase.STARTING:
            return
        conn = process.session.conn
        blocked = conn is not None and self._conns[conn].blocked
        paused = pause_wanted(process, blocked, self._held_bytes, self.config.max_held_bytes)
        if process.life.set_paused(paused):
            action = PauseOutput if paused else ResumeOutput
            self._emit(action(proc=process.proc))

    def _sync_session(self, session: Session) -> None:
        for process in session.processes.values():
            self._sync_paused(process)

    def _sync_held(self) -> None:
        """Count the output held for detached sessions afresh, and pause or resume their
        processes by it (after a session comes or goes, or a process stops holding)."""
        detached = [p for p in self._procs.values() if p.life.held and p.session.conn is None]
        self._held_bytes = sum(p.log.retained_bytes for p in detached)
        for process in detached:
            self._sync_paused(process)


def _read_result(
    process: Process, after_seq: int, max_bytes: int | None
) -> tuple[dict[str, Any], bool]:
    """The read's answer, and whether max_bytes cut it short."""
    chunks, truncated = process.log.read(after_seq, max_bytes)
    log = process.log
    first = log.first_retained_seq
    result = {
        "chunks": [
            {"seq": c.seq, "stream": c.stream, "chunk": process.b64encode(c.data).decode("ascii")}
            for c in chunks
        ],
        "nextSeq": chunks[-1].seq + 1 if truncated else process.next_seq,
        "exited": process.life.phase in (Phase.EXITED, Phase.CLOSED),
        "exitCode": process.exit_code,
        "closed": process.life.phase is Phase.CLOSED,
        "failure": process.failure,
        "sandboxDenied": process.sandbox_denied,
        "firstRetainedSeq": first if first is not None else process.next_seq,
        "droppedBytes": log.dropped_bytes,
    }
    return result, truncated


# How each process follow-up of `_lifecycle.Do` is carried out.
_FOLLOW_UPS: dict[Do, Callable[[ProcessHandlers, Process], None]] = {
    Do.SETTLE: ProcessHandlers._settle,
    Do.SIGNAL_TERM: ProcessHandlers._signal_term,
    Do.SIGNAL_KILL: ProcessHandlers._signal_kill,
    Do.SET_KILL: ProcessHandlers._set_kill,
    Do.CANCEL_KILL: ProcessHandlers._cancel_kill,
    Do.SET_ABANDON: ProcessHandlers._set_abandon,
    Do.CANCEL_ABANDON: ProcessHandlers._cancel_abandon,
    Do.RELEASE_HOLD: ProcessHandlers._release_hold,
    Do.NOTIFY_CLOSED: ProcessHandlers._notify_closed,
    Do.RETIRE: ProcessHandlers._retire,
    Do.RECOUNT_IF_HELD: ProcessHandlers._recount_if_held,
    Do.SET_EVICT: ProcessHandlers._set_evict,
    Do.FINALIZE: ProcessHandlers._finalize,
    Do.FORGET: ProcessHandlers._forget,
    Do.FAIL_READERS: ProcessHandlers._fail_readers,
    Do.FINALIZE_FAILED: ProcessHandlers._finalize_failed,
    Do.WAKE_READERS: ProcessHandlers._wake_readers,
    Do.SYNC_PAUSED: ProcessHandlers._sync_paused,
    Do.APPLY_SIZE: ProcessHandlers._apply_size,
}
