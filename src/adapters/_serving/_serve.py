"""What every adapter's ``serve`` does the same way: its options, building the core and its
driver, the listener, the websocket peers, and the shutdown. An adapter adds only what its
loop makes different: how bytes move, how the stop is heard and how it waits for the end."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from execproto import Config, Drain, ServerCore

from .._files._fs import Files
from .._loop import Loop
from .._wire._auth import Token
from .._wire._gate import Gate
from .._wire._listen import Acceptor, Listen
from .._wire._peer import Write, WsPeer
from ..backends import Backend, LocalBackend, check_sandbox_type
from ._base64 import with_fast_base64
from ._driver import Driver
from ._host import this_host

if TYPE_CHECKING:
    import ssl

    from execproto.trace import Recorder

log = logging.getLogger("execproto")
PING_INTERVAL = 30.0
PROBE_AFTER = 0.05  # seconds after listening that the backend's probe starts (see `announce`)


@attrs.frozen(kw_only=True, eq=False, slots=False)  # never compared (see `Refusal`), one made
class Options:
    """What ``serve`` takes besides the address and the stop, on every adapter. Each may also be
    given to ``serve`` as a keyword of its own (``serve(listen, ready=print, stop=stop)``).

    - ``config``: the core's `Config` (limits, timeouts, the sandbox floor).
    - ``token``: the bearer token every websocket client must send, if any; or a function
      that gives the token of the moment (``execproto serve`` re-reads its token file); or an
      `_wire._auth.Authenticator` that judges each upgrade's ``Authorization`` header (a
      token known by its SHA-256, a signed JWT).
    - ``trace``: called with each line of a replayable trace (one JSON line per core call).
    - ``redact_trace``: the trace with process output and stdin replaced by filler.
    - ``ready``: called with the bound address (``ws://IP:PORT``, or ``stdio``) once clients
      can connect.
    - ``ping_interval``: seconds between websocket pings.
    - ``fs_roots``: directories every ``fs/*`` path is confined to.
    - ``backend``: how a process is spawned (by default this machine, with bubblewrap for
      sandboxed requests where it can run).
    - ``tls``: the `ssl.SSLContext` (server side) of a ``wss://`` address, which needs one
      (`_tls.server_context` makes one from PEM files), or a function that gives the context
      for each new connection (``execproto serve`` reloads its certificate when the files
      change: `_tls.CertFiles`); unused by ``ws://``.
    - ``drain_grace``: seconds a drain (the first SIGTERM or SIGINT of ``execproto serve``, or
      an embedder's ``drain``) waits for the running processes to finish before the server
      stops; 0, the default, stops at once.
    - ``protect``: what else every sandbox holds read-only (`Config.protected`): a function
      called once, where the core is made (before any process or fs call, all of which the
      core starts), so that a start does not wait for it: ``execproto serve`` gives the files
      the server runs and loads (`_command._own_files`), whose reading is ~15 ms.
    - ``tune_heap``: raise glibc's mmap and trim thresholds for the whole process, so output
      buffers stay in the heap (measured: half the CPU of a fast stream went to page faults
      without), and hand free heap memory back every 2 s from the loop. Off by default: it
      changes the host's allocator and schedules work on its loop; ``execproto serve`` turns
      it on.
    """

    config: Config | None = None
    token: Token = None
    trace: Callable[[str], None] | None = None
    redact_trace: bool = False
    ready: Callable[[str], None] | None = None
    ping_interval: float = PING_INTERVAL
    fs_roots: Sequence[str] = ()
    backend: Backend | None = None
    tune_heap: bool = False
    tls: ssl.SSLContext | Callable[[], ssl.SSLContext] | None = None
    drain_grace: float = 0.0
    protect: Callable[[], Sequence[str]] | None = None

    @classmethod
    def of(cls, options: Options | None, keywords: dict[str, Any]) -> Options:
        """``options`` (or the defaults) with ``keywords`` over them; an unknown keyword raises
        TypeError, as it would on a function's signature."""
        return attrs.evolve(options or cls(), **keywords)


def make_core(
    config: Config | None,
    trace: Callable[[str], None] | None,
    backend: Backend | None = None,
    redact_trace: bool = False,
    protect: Callable[[], Sequence[str]] | None = None,
) -> tuple[ServerCore | Recorder, Backend]:
    """A core for this host and the backend it spawns through, recording to ``trace`` when
    given, its config's `Config.protected` with what ``protect()`` adds (see `Options`). A
    backend whose `sandbox_type` no client can read raises ValueError."""
    config = config or Config()
    if protect is not None:
        config = attrs.evolve(config, protected=(*config.protected, *protect()))
    backend = backend or LocalBackend(floor=config.floor)
    sandbox = check_sandbox_type(backend)
    host = this_host(network_proxy=bool(getattr(backend, "network_proxy", False)),
                     transparent=bool(getattr(backend, "network_proxy_transparent", False)))
    core = ServerCore(attrs.evolve(with_fast_base64(config), sandbox_type=sandbox), host)
    if trace is None:
        return core, backend
    from execproto.trace import Recorder  # imported only by a server that records

    return Recorder(core, trace, redact=redact_trace), backend


Connect = Callable[[socket.socket, str], object]


class Server:
    """One server's life on a `Loop`: built here, stopped with `shut_down`, and after the
    adapter has waited for the driver to be idle, `finish`. ``stopped`` is called if the core
    fails, to start the same stop as the adapter's own."""

    def __init__(self, listen: str, options: Options, loop: Loop,
                 stopped: Callable[[], None]) -> None:
        self.where = Listen.parse(listen)
        if self.where.tls and options.tls is None:
            raise ValueError(f"{listen} needs a TLS context: serve(..., tls=context)")
        self.options = options
        config = options.config
        floor = config.floor if config else None
        backend = self.backend = options.backend or LocalBackend(floor=floor)
        if not isinstance(backend, LocalBackend):  # ours always is: an embedder's, said now
            check_sandbox_type(backend)
        files = Files(options.fs_roots, floor)
        # The core is made at its first event: what it announces waits for the backend's
        # probe of bubblewrap, which runs once the server listens (`announce`), so that a
        # start does not wait for it.
        self.driver = Driver(
            lambda: make_core(config, options.trace, backend, options.redact_trace,
                              options.protect)[0],
            loop, files, backend, tune_heap=options.tune_heap)
        self.driver.on_failure = stopped
        self.gate = Gate(config, tls=self.where.tls)
        self._acceptor: Acceptor | None = None

    def listen(self, connect: Connect) -> None:
        """Accept websocket clients, each handed to ``connect`` with its label (``IP:PORT``)
        unless too many are still in their upgrade or, on ``wss://``, too many TLS handshakes
        began (`Gate.admit`: then it is closed at once, keeping the descriptor)."""
        loop = self.driver.loop

        def accept(sock: socket.socket, address: Any) -> None:
            if not self.gate.admit(loop.now(), address[0]):
                sock.close()
                return
            connect(sock, f"{address[0]}:{address[1]}")

        self._acceptor = Acceptor(loop, self.where.host, self.where.port, accept)

    def ws_peer(self, label: str, write: Write, hang_up: Callable[[], None],
                abort: Callable[[], None]) -> WsPeer:
        options = self.options
        return WsPeer(self.driver.connections, write, hang_up, options.token, self.gate, label,
                      abort=abort, ping_interval=options.ping_interval, tls=self._tls())

    def _tls(self) -> ssl.SSLContext | None:
        tls = self.options.tls
        if not self.where.tls or tls is None:
            return None
        return tls() if callable(tls) else tls

    def announce(self) -> None:
        """Tell ``ready`` where clients can connect, and start the backend's probe of
        bubblewrap PROBE_AFTER later, unless the first client's core has run it by then: the
        probe holds the interpreter's lock for much of its ~40 ms, which would hold up the
        loop's first answers (the /readyz an orchestrator waits on among them)."""
        if self.options.ready is not None:
            bound = self._acceptor.address if self._acceptor is not None else None
            self.options.ready(self.where.describe(bound))
        if isinstance(self.backend, LocalBackend):
            loop = self.driver.loop
            loop.call_at(loop.now() + PROBE_AFTER, self.backend.probe)

    def drain(self, done: Callable[[], None]) -> None:
        """Begin a graceful stop, on the loop: /readyz and new upgrades answer 503, the core
        starts no new process, and every connection goes on, so running processes finish and
        their output is read. ``done`` (the adapter's stop) is called once, when the last
        process is finalized or ``drain_grace`` seconds have passed, whichever is first."""
        grace = self.options.drain_grace
        if self.gate.draining:
            done()
            return
        if grace <= 0:
            log.info("no drain grace (--drain-grace 0): stopping at once")
            done()
            return
        self.gate.draining = True
        called = False

        def finish(why: str) -> None:
            nonlocal called
            if not called:
                called = True
                log.info("drained: %s; stopping", why)
                done()

        log.info("draining: no new connections or processes; stopping when the last process "
                 "finishes, or in %g s", grace)
        loop = self.driver.loop
        loop.call_at(loop.now() + grace, lambda: finish(f"the {grace:g} s grace ran out"))
        self.driver.on_idle = lambda: finish("every process has finished")
        self.driver.feed(Drain())
        if self.driver.idle:
            finish("no process was running")

    def shut_down(self, idle: Callable[[], None]) -> None:
        """Stop accepting, close every connection and terminate every process; ``idle`` is
        called (on the loop) when all of it is done."""
        if self._acceptor is not None:
            self._acceptor.close()
        held = self._core().gauges()
        log.info("stopping: closing %d connections (1001), ending %d processes",
                 held["connections"], held["processes"],
                 extra={"fields": {"connections": held["connections"],
                                   "processes": held["processes"]}})
        self.driver.on_idle = idle
        self.driver.shutdown()

    def finish(self) -> None:
        """After the adapter has waited for ``idle``: raise `CoreFailed` if the core's failure
        is what stopped it. Whatever the processes left running is killed first."""
        self.driver.close()
        self.driver.raise_if_failed()
        log.info("stopped")

    def _core(self) -> ServerCore:
        core = self.driver.core
        return core if isinstance(core, ServerCore) else core.core
