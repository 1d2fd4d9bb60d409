"""Spawn backends: how a requested process becomes the local command that runs it.

A backend's `prepare` turns the request into an `ExecSpec` (the argv, environment and cwd to
spawn here, plus an opaque token), or refuses it with `Refused` (the client gets -32602 and
nothing runs). Its `finalize(token, status, exit_code, timed_out)` is called exactly once for
every successful `prepare`, only after the process is closed (every pipe at EOF, or abandoned):
``status`` is "completed" with the exit code, or "failed" with None when the spawn failed. A
finalize that raises is logged and shown as the process's ``failure``; it never stops the server.

Give your own on the command line as ``--backend module:factory``: ``factory()`` returns the
backend (a docker or ssh one, say; see the README).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from execproto import Policy, SpawnSpec

# The sandbox's own modules (`_bwrap` and what it runs) load when the probe of bubblewrap
# runs or at the first sandboxed start, as the files room's `_beneath` does here: a
# server's start pays for neither.
from ._processes import _netns, _placeholders, _posix

# The interface a backend keeps with the processes room, defined there and named here too:
# this module is where an embedder's backend finds it.
from ._processes._backend import SANDBOX_TYPES as SANDBOX_TYPES
from ._processes._backend import Backend as Backend
from ._processes._backend import ExecSpec as ExecSpec
from ._processes._backend import Listeners as Listeners
from ._processes._backend import NoNetwork as NoNetwork
from ._processes._backend import Refused as Refused
from ._processes._posix import resolve_program
from ._processes._wrappers import PID_NAMESPACES, WRAPPER_ENV

if TYPE_CHECKING:
    # The proxy's policy and credential masking are loaded at the first proxied start.
    from execproto.netproxy import ProxyConfig

    from ._processes._bwrap import Budget

log = logging.getLogger("execproto")


@attrs.frozen
class _Token:
    """What a sandboxed process's finalize releases: the placeholders it used, and the
    private network its proxy is all of, if any."""

    uses: tuple[str, ...]
    network: _netns.Holder | None = None

    def __bool__(self) -> bool:
        """Whether there is anything to release (a falsy token's finalize runs inline)."""
        return bool(self.uses) or self.network is not None


CANNOT_ENFORCE = "sandbox intent cannot be enforced on this executor"
NO_PASTA = ("the network cannot be given apart from the host's: pasta (Debian's passt) is not "
            "installed, or cannot open /dev/net/tun")


class LocalBackend:
    """Runs the argv as given, on this machine; a sandboxed request inside bubblewrap.

    ``bwrap`` is the bubblewrap to use (found on PATH and probed by default; None: no sandbox
    can be enforced, and the core refuses requests for one). ``floor`` is the operator's policy,
    applied again to each request's rules once their symlinks are resolved. A sandbox allowed
    the network gets its session's network namespace (`_netns`: one per session, made at its
    first such start, reached from outside through ``pasta``, passt's, found on PATH by
    default; None: such a sandbox is refused), not the host's loopback, unless
    ``host_network`` shares the host's network with it.

    The probe of bubblewrap runs it once (~40 ms, and the seccomp filter's first build): on a
    thread of its own once `probe` is called, or else where the answer is first needed
    (`sandbox_type`, `network_proxy`, `problem`, `warnings`, `describe`, a sandboxed
    `prepare`), which waits for it. A server calls `probe` once it has listened a moment, so
    that neither its start nor its first answers wait; its first client's ``initialize``,
    which says what the probe found, makes the core, which asks.
    """

    def __init__(self, floor: Policy | None = None, bwrap: str | None = "",
                 host_network: bool = False, pasta: str | None = "",
                 pid_namespace: str = "isolate") -> None:
        if pid_namespace not in PID_NAMESPACES:
            raise ValueError(f"pid_namespace is one of {', '.join(PID_NAMESPACES)}, "
                             f"not {pid_namespace!r}")
        # A sandbox's pid namespace: its own ("isolate") or the host's ("inherit"), as the
        # reference's --linux-sandbox-pid-namespace (`_wrappers.PID_NAMESPACES`).
        self._pid_namespace = pid_namespace
        # Why no sandbox can be enforced here, for the operator (None: one can).
        self._problem: str | None = None
        # Looked up now, while no process the server started can have changed the PATH's
        # directories; probed (run) later.
        self._found: str | None = bwrap or (_posix.real_program("bwrap") if bwrap == "" else None)
        self._probe_lock = threading.Lock()
        self._probed = threading.Event()  # the answer is in
        self._probing = False  # a thread has it in hand
        self._then: list[Callable[[], None]] = []  # called once it is in
        if bwrap != "" or self._found is None:
            self._problem = None if self._found else "bubblewrap (bwrap) is not installed"
            self._probed.set()
        self._pasta = _usable_pasta() if pasta == "" else pasta
        self._host_network = host_network
        self._networks = _netns.Networks(self._pasta)
        self._tools = _netns.Tools.find()  # for transparent TCP
        self.floor = floor
        # Placeholder directories the stage made on the host, by how many live sandboxes use
        # them; safe to share between starts prepared at once (`_placeholders.Placeholders`
        # says why).
        self._placeholders = _placeholders.Placeholders()

    def probe(self) -> None:
        """Probe bubblewrap on a thread of its own, if no one has yet."""
        with self._probe_lock:
            if self._probed.is_set() or self._probing:
                return
            self._probing = True
        threading.Thread(target=self._find_bwrap, daemon=True,
                         name="execproto-bwrap-probe").start()

    def when_probed(self, then: Callable[[], None]) -> None:
        """Call ``then`` once the probe's answer is in: now if it is, else on the thread that
        probes (this call starts none)."""
        with self._probe_lock:
            if not self._probed.is_set():
                self._then.append(then)
                return
        then()

    def _find_bwrap(self) -> None:
        assert self._found is not None
        try:
            from ._processes import _bwrap


            self._problem = _bwrap.problem(self._found)
        except Exception as exc:  # a bug, or the host's own way of failing: no sandbox
            log.debug("the probe of bubblewrap failed", exc_info=True)
            self._problem = f"the probe of bubblewrap failed ({type(exc).__name__}: {exc})"
        if self._problem is not None:
            self._found = None
        with self._probe_lock:
            self._probed.set()
            then, self._then = self._then, []
        for call in then:
            try:
                call()
            except Exception:  # a report's own failure; the answer stands
                log.exception("after the probe of bubblewrap")

    @property
    def _bwrap(self) -> str | None:
        """The bubblewrap to sandbox with, once the probe has said (None: none can)."""
        if not self._probed.is_set():
            with self._probe_lock:
                here = not self._probing  # no one has it in hand: this thread, now
                self._probing = True
            if here:
                self._find_bwrap()
            self._probed.wait()
        return self._found

    @property
    def problem(self) -> str | None:
        return self._problem if self._bwrap is None else None

    @property
    def sandbox_type(self) -> str:
        return "linuxSeccomp" if self._bwrap is not None else "none"

    @property
    def network_proxy_transparent(self) -> bool:
        """Whether the proxy takes TCP from programs that ignore its variables too (nftables,
        nsenter and root, besides what `network_proxy` needs; optional for a backend)."""
        return self.network_proxy and self._tools is not None

    @property
    def network_proxy(self) -> bool:
        """Whether this backend launches the managed network proxy (`SpawnSpec.proxy`): where
        bubblewrap works, so that a sandbox's proxy is all of its network (optional for a
        backend; without it, the server announces no proxy)."""
        return self._bwrap is not None

    def warnings(self) -> list[str]:
        """What the operator should hear at start-up about what cannot be enforced here."""
        if self._bwrap is None:
            return [f"no sandbox can be enforced here ({self.problem}): requests for one are "
                    "refused"]
        if self._pasta is None and not self._host_network:
            return [f"{NO_PASTA}: a sandbox that asks for the network is refused "
                    "(or give --host-network)"]
        if not self._host_network and not _netns.host_routed():
            return ["this host has no routable interface: a sandbox allowed the network gets "
                    "its session's loopback only"]
        return []

    def describe(self) -> str:
        """What a sandbox is here and who gets one, for the operator's start-up line."""
        if self._bwrap is None:  # it said "none can be enforced; only ... are sandboxed"
            return ("none can be enforced: a process that asks for one is refused, the others "
                    "run unsandboxed")
        network = ("shares the host's" if self._host_network
                   else "gets its session's, through pasta" if self._pasta is not None
                   else "is refused (no pasta)")
        how = (f"bubblewrap ({self._bwrap}) with a seccomp filter; one allowed the network "
               f"{network}")
        if self.floor is None:
            return f"{how}; only the processes that ask for one are sandboxed"
        rules = ", ".join(f"{rule.access} {rule.path}" for rule in self.floor.rules
                          if rule.access != "none" or rule.path != "/")
        network = "network allowed" if self.floor.network else "no network"
        return f"{how}; every process is sandboxed, at most: {rules}; {network}"

    def prepare(self, request: SpawnSpec) -> ExecSpec:
        if request.sandbox is None:
            listeners = None if request.proxy is None else _listen(socket.socket, request.proxy)
            env, listeners = ((request.env, None) if listeners is None
                              else _with_proxy(request, listeners))
            return ExecSpec(argv=request.argv, env=env, cwd=request.cwd, arg0=request.arg0,
                            listeners=listeners)
        if self._bwrap is None:
            raise Refused(CANNOT_ENFORCE)
        proxied = request.proxy is not None and request.sandbox.network
        if proxied and self._host_network:
            raise Refused(f"{CANNOT_ENFORCE}: the managed network proxy needs a network of the "
                          "sandbox's own, and this server shares the host's (--host-network)")
        if request.sandbox.network and not (self._host_network or proxied) and (
                self._pasta is None):
            raise Refused(f"{CANNOT_ENFORCE}: {NO_PASTA}")
        from ._processes import _bwrap

        policy = request.sandbox
        private = listeners = None
        try:
            if proxied:  # a network of its own, with nothing in it but loopback and the proxy
                assert request.proxy is not None
                private = _netns.Holder(None)
                listeners = _listen(private.socket, request.proxy)
                if request.proxy.transparent_tcp:
                    listeners = self._transparent(private, listeners)
                if request.proxy.credential_masking:  # its CA bundle: readable, not writable
                    from ._proxy import _masking

                    policy = _masking.bundle_readable(policy)
                env, listeners = _with_proxy(request, listeners)
                request = attrs.evolve(request, env=env)
            network = (None if self._host_network
                       else (lambda: private) if private is not None
                       else functools.partial(self._networks.of, request.session_id))
            sandbox = _bwrap.Sandbox(self._bwrap, self.floor, self._placeholders,
                                     network=network, pid_namespace=self._pid_namespace)
            # The start's budget (`_bwrap.Budget`) covers the program's lookup too.
            _bwrap.Budget.shape(policy)
            program = self._visible_program(request, sandbox.budget)
            argv = sandbox.command(policy, request, program)
        except BaseException as exc:
            if listeners is not None:
                listeners.close()
            if private is not None:
                private.close()
            if isinstance(exc, _bwrap.CannotEnforce):
                raise Refused(f"{CANNOT_ENFORCE}: {exc}") from None
            if isinstance(exc, _netns.HolderFailed):
                raise Refused(f"{CANNOT_ENFORCE}: the sandbox's network could not be made: "
                              f"{exc}") from None
            raise
        return ExecSpec(argv=tuple(argv), env=WRAPPER_ENV, cwd=request.cwd,
                        pass_fds=tuple(sandbox.fds), listeners=listeners,
                        token=_Token(tuple(sandbox.uses), private))

    def _transparent(self, private: _netns.Holder, listeners: Listeners) -> Listeners:
        """Transparent TCP: ``private``'s every other TCP connection and DNS question go to
        two more sockets of its own, for the proxy to take through the same policy."""
        if self._tools is None:
            raise Refused(f"{CANNOT_ENFORCE}: transparent TCP needs nftables and nsenter, "
                          "and a server run as root")
        tcp = private.socket(socket.AF_INET, socket.SOCK_STREAM)
        dns = private.socket(socket.AF_INET, socket.SOCK_DGRAM)
        listeners = attrs.evolve(listeners, transparent=tcp, dns=dns)
        try:
            tcp.bind(("127.0.0.1", 0))
            tcp.listen(PROXY_BACKLOG)
            dns.bind(("127.0.0.1", 0))
            private.redirect(self._tools, tcp.getsockname()[1], dns.getsockname()[1])
        except BaseException:
            listeners.close()
            raise
        return listeners

    def _visible_program(self, request: SpawnSpec, budget: Budget) -> str:
        """The program, looked up where the sandbox lets it look. The cwd and the program are
        checked on the host, before the sandbox exists, for a clean spawn error; a path the
        policy hides must then fail as if it were absent, or the error would tell whether it
        exists."""
        from execproto.policy import PlantedLink, pinned

        from ._files._beneath import Scope

        assert request.sandbox is not None
        try:  # `_beneath.resolved_policy`, reading links within the budget; only what may be
            # read is asked of it (the caps of the server's own files mostly count not)
            resolved = pinned(request.sandbox, budget.readlink, self.floor,
                              reading=True).narrow(self.floor)
            scope = Scope((), resolved)
        except PlantedLink as exc:
            raise Refused(f"{CANNOT_ENFORCE}: {exc}") from None

        def hidden(path: str) -> bool:
            return not scope.allows(os.path.realpath(path), "read")

        named = request.argv[0]
        if hidden(request.cwd) or ("/" in named and hidden(os.path.join(request.cwd, named))):
            raise _posix.not_found()
        env = dict(request.env)
        search = env.get("PATH", os.defpath).split(os.pathsep)
        env["PATH"] = os.pathsep.join(d for d in search if not hidden(os.path.join(request.cwd, d)))
        program = resolve_program(named, env, request.cwd)
        if hidden(program):
            raise _posix.not_found()
        return program

    def finalize(self, token: Any, status: str, exit_code: int | None, timed_out: bool) -> None:
        # The sandbox is gone: the mount points it used on the host are removed once no
        # other sandbox still mounts on them.
        if token:
            self._placeholders.release(token.uses)
            if token.network is not None:
                token.network.close()

    def session_socket(self, session_id: str, family: int, kind: int) -> socket.socket:
        """A new socket in the session's network (made now if the session has none yet), to
        connect into it from outside: what a sandbox of that session listens on is reached
        so, and nothing it could not reach itself. Blocks (a network's making takes ~30 ms):
        call it off the owner. Raises `NoNetwork` where sandboxes get no network of their own
        (no pasta, or ``host_network``), `Refused` where the session's could not be made."""
        if self._host_network or self._pasta is None:
            raise NoNetwork("sandboxes here get no network of their own (no pasta, or "
                            "--host-network)")
        try:
            return self._networks.of(session_id).socket(family, kind)
        except _netns.HolderFailed as exc:
            raise Refused(f"the session's network could not be made: {exc}") from None

    def end_session(self, session_id: str) -> Callable[[], None] | None:
        """The session is gone: so is its network (optional for a backend). Quick; returns
        what is left to do that blocks (the holder's exit, to be run off the owner), if
        anything."""
        return self._networks.end(session_id)

    def close(self) -> None:
        """The server stopped: every session's network goes (optional for a backend)."""
        self._networks.close()


# How many connections a proxy listener's backlog holds while the room is not accepting.
PROXY_BACKLOG = 128


def _listen(make: Callable[[int, int], socket.socket], proxy: ProxyConfig) -> Listeners:
    """The proxy's listeners, on 127.0.0.1 of wherever ``make`` makes sockets."""
    def listener() -> socket.socket:
        sock = make(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            sock.listen(PROXY_BACKLOG)
        except BaseException:
            sock.close()
            raise
        return sock

    http = listener()
    try:
        socks = listener() if proxy.enable_socks5 else None
    except BaseException:
        http.close()
        raise
    return Listeners(http=http, socks=socks, udp=proxy.enable_socks5 and proxy.enable_socks5_udp)


def _with_proxy(request: SpawnSpec,
                listeners: Listeners) -> tuple[tuple[tuple[str, str], ...], Listeners]:
    """The child's environment with the proxy's variables (the policy's, `proxy_env`): they
    win over the client's own, as the reference's do. With credential masking, its
    credentials masked too, and the listeners carry what the proxy brokers."""
    from execproto.netproxy import proxy_env

    from ._proxy import _masking

    assert request.proxy is not None
    socks = listeners.socks.getsockname()[1] if listeners.socks is not None else None
    added = proxy_env(request.proxy, listeners.http.getsockname()[1], socks)
    env = tuple((name, value) for name, value in request.env if name not in added) + tuple(
        added.items())
    if not request.proxy.credential_masking:
        return env, listeners
    try:
        env, credentials = _masking.masked(request.argv, env, request.proxy, request.process_id)
    except Refused:  # its CA could not be made (`_proxy._trust`): nothing listens for it
        listeners.close()
        raise
    return env, attrs.evolve(listeners, credentials=credentials)


def _usable_pasta() -> str | None:
    """pasta, where it can give a namespace its network: it needs the tun device (which some
    machines keep to root)."""
    pasta = _posix.real_program("pasta")  # passt's file: `_hold` runs it named pasta
    if pasta is None:
        return None
    try:
        os.close(os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC))
    except OSError:
        return None
    return pasta


def no_pasta() -> bool:
    """Whether a sandbox here can get no network of its own."""
    return _usable_pasta() is None


def bwrap_sandbox(writable_roots: Sequence[str] = (), allow_network: bool = False,
                  host_network: bool = False, pid_namespace: str = "isolate") -> LocalBackend:
    """The backend of ``--sandbox bwrap``: every process sandboxed, at most the whole
    filesystem read-only but the writable roots, and no network unless allowed."""
    from ._processes import _bwrap

    bwrap = _posix.real_program("bwrap")
    if bwrap is None:
        raise RuntimeError("--sandbox bwrap needs bubblewrap (the bwrap command), not found")
    problem = _bwrap.problem(bwrap)
    if problem is not None:
        raise RuntimeError(problem)
    return LocalBackend(floor=operator_floor(writable_roots, allow_network), bwrap=bwrap,
                        host_network=host_network, pid_namespace=pid_namespace)


def operator_floor(writable_roots: Sequence[str], allow_network: bool) -> Policy:
    from execproto.policy import PathRule  # (the policy's rules, links and globs: not at start)

    rules = [PathRule(path="/", access="read")]
    for root in writable_roots:
        if not os.path.isdir(root):
            raise ValueError(f"--writable-root {root}: not a directory")
        rules.append(PathRule(path=os.path.realpath(root), access="write"))
    return Policy.of(rules, network=allow_network)


def check_sandbox_type(backend: Backend) -> str:
    """The backend's `sandbox_type`, if the client can read it."""
    label = getattr(backend, "sandbox_type", "none")
    if label not in SANDBOX_TYPES:
        raise ValueError(f"the backend's sandbox_type {label!r} is not one a client knows: "
                         f"give one of {', '.join(SANDBOX_TYPES)}")
    return str(label)


def load(spec: str) -> Backend:
    """A backend from ``module:factory`` (``factory()`` returns it)."""
    module_name, _, factory = spec.partition(":")
    if not module_name or not factory:
        raise ValueError(f"--backend must be module:factory, got {spec!r}")
    backend = getattr(importlib.import_module(module_name), factory)()
    for needed in ("prepare", "finalize"):
        if not callable(getattr(backend, needed, None)):
            raise ValueError(f"{spec} made {backend!r}, which has no {needed}()")
    return backend  # type: ignore[no-any-return]
