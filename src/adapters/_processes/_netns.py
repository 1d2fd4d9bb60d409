"""Network namespaces the server holds: one per session for its sandboxes with the network,
and a private one per process behind the managed proxy.

A `Holder` is a `_hold` process keeping one namespace (see there for what it makes); the
server keeps the namespace's descriptors (`/proc/PID/ns/net`, and its user namespace's), which
each sandbox's stage joins, and asks the holder for sockets of that namespace. `Networks`
keeps a session's holder from its first sandbox with the network to the session's end
(`end`), detached included, so that what one command serves the next reaches, as on a
machine. Everything here blocks (a holder takes pasta's start, ~30 ms): it runs where
sandboxes are prepared, off the owner.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Callable

import attrs

from .._system import which
from ._wrappers import WRAPPER_ENV, WRAPPER_PATH

# How long a holder may take to make its namespace (pasta's route included).
READY_WAIT = 10.0
ENDED_KEPT = 4096


def host_routed() -> bool:
    """Whether this host has a default route, which pasta needs to reach out."""
    from . import _hold  # as the sandbox's modules, at its first need

    return _hold.routed()


# Taken before the loopback exemption: a resolver on 127.0.0.53 is the proxy's to answer too.
TRANSPARENT_RULES = """
table ip execproto {{
    chain out {{
        type nat hook output priority -100; policy accept;
        udp dport 53 redirect to :{dns}
        ip daddr 127.0.0.0/8 return
        meta l4proto tcp redirect to :{tcp}
    }}
}}
"""


@attrs.frozen(eq=False)  # never compared: an equality attrs would compile at every start
class Tools:
    """What the transparent proxy needs on this host, found at the server's start."""

    nft: str
    nsenter: str

    @classmethod
    def find(cls) -> Tools | None:
        """nftables and util-linux's nsenter, where the server is root (a namespace's rules
        are loaded by a program the server runs in it, which keeps its capabilities only as
        root); None where any of it is missing."""
        nft = which("nft", path=WRAPPER_PATH)
        nsenter = which("nsenter", path=WRAPPER_PATH)
        if os.geteuid() != 0 or nft is None or nsenter is None:
            return None
        return cls(nft=os.path.realpath(nft), nsenter=os.path.realpath(nsenter))


class HolderFailed(OSError):
    """The namespace could not be made."""


class Holder:
    """One network namespace, held by a process of its own till `close`."""

    def __init__(self, pasta: str | None) -> None:
        from ._bwrap import HOLD  # the sandbox's modules, loaded by its first need

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._control = ours
        self._lock = threading.Lock()
        fds = [theirs.fileno()]
        argv = [*HOLD.argv(fds), str(theirs.fileno()), pasta or ""]
        try:
            self._process = subprocess.Popen(argv, pass_fds=fds, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL,
                                             env=dict(WRAPPER_ENV), cwd="/")
        finally:
            theirs.close()
            for fd in fds[1:]:
                os.close(fd)
        self.net = self.user = -1
        try:
            ours.settimeout(READY_WAIT)
            said = ours.recv(4096).decode(errors="replace")
            if not said.startswith("ok "):
                raise HolderFailed(said.removeprefix("error ") or "the holder exited")
            self.mode = said[3:]  # routed, or loopback
            namespaces = f"/proc/{self._process.pid}/ns"
            self.net = os.open(f"{namespaces}/net", os.O_RDONLY | os.O_CLOEXEC)
            self.user = os.open(f"{namespaces}/user", os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            self.close()
            raise

    def socket(self, family: int, kind: int) -> socket.socket:
        """A new socket of this namespace."""
        with self._lock:
            self._control.send(f"socket {family} {kind}".encode())
            said, fds, _, _ = socket.recv_fds(self._control, 4096, 1)
        if said != b"ok" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise HolderFailed(said.decode(errors="replace").removeprefix("error "))
        return socket.socket(fileno=fds[0])

    def route_everything(self) -> None:
        """A default route onto loopback in this namespace (`_hold.route_everything`)."""
        with self._lock:
            self._control.send(b"route")
            said = self._control.recv(4096)
        if said != b"ok":
            raise HolderFailed(said.decode(errors="replace").removeprefix("error "))

    def redirect(self, tools: Tools, tcp_port: int, dns_port: int) -> None:
        """The transparent proxy's rules in this namespace (nftables, loaded by ``nft`` run
        in it through ``nsenter``): every TCP connection but to loopback goes to
        127.0.0.1:``tcp_port``, every datagram to port 53 to 127.0.0.1:``dns_port``."""
        self.route_everything()
        rules = TRANSPARENT_RULES.format(tcp=tcp_port, dns=dns_port)
        done = subprocess.run([tools.nsenter, f"--net=/proc/self/fd/{self.net}", "--",
                               tools.nft, "-f", "-"], input=rules.encode(),
                              pass_fds=(self.net,), capture_output=True,
                              env=dict(WRAPPER_ENV), timeout=READY_WAIT)
        if done.returncode != 0:
            raise HolderFailed("the transparent proxy's rules: "
                               + done.stderr.decode(errors="replace").strip())

    def close(self) -> None:
        """Let the holder go (it exits on the closed socket, pasta with it) and reap it. The
        namespace itself ends with the last process in it."""
        self._control.close()
        for fd in (self.net, self.user):
            if fd >= 0:
                os.close(fd)
        self.net = self.user = -1
        try:
            self._process.wait(timeout=READY_WAIT)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class Networks:
    """Each session's network, made at its first sandbox with the network."""

    def __init__(self, pasta: str | None) -> None:
        self._pasta = pasta
        self._lock = threading.Lock()
        self._held: dict[str, Holder] = {}
        self._making: dict[str, threading.Lock] = {}
        # Sessions ended lately (a start prepared meanwhile must not make their network
        # again), the oldest forgotten: a preparation is seconds old at most.
        self._ended: dict[str, None] = {}

    def of(self, session_id: str) -> Holder:
        """The session's network, made now if it has none yet."""
        with self._lock:
            found = self._held.get(session_id)
            if found is not None:
                return found
            making = self._making.setdefault(session_id, threading.Lock())
        with making:  # one holder per session, while other sessions' are made meanwhile
            with self._lock:
                found = self._held.get(session_id)
                if found is not None:
                    return found
                if session_id in self._ended:
                    raise HolderFailed("the session has ended")
            holder = Holder(self._pasta)
            with self._lock:
                self._making.pop(session_id, None)
                if session_id in self._ended:  # ended while it was made
                    holder.close()
                    raise HolderFailed("the session has ended")
                self._held[session_id] = holder
            return holder

    def end(self, session_id: str) -> Callable[[], None] | None:
        """The session is gone: its network goes too (what still runs in it is being
        stopped, and keeps it till then, with no way out). Quick: returns the holder's close,
        which blocks till it exits, if it had one; one being made is closed by its maker."""
        with self._lock:
            self._ended[session_id] = None
            while len(self._ended) > ENDED_KEPT:
                del self._ended[next(iter(self._ended))]
            holder = self._held.pop(session_id, None)
        return None if holder is None else holder.close

    def close(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for holder in held:
            holder.close()
