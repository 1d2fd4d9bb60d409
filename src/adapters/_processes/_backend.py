"""What the processes room asks of a backend (`Backend`: ``prepare`` a request into an
`ExecSpec`, ``finalize`` it), and what a backend answers with: the command to run, its proxy
`Listeners`, or a refusal (`Refused`). `backends` names them for an embedder's backend;
`backends.LocalBackend` is this machine's.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from execproto import SpawnSpec

if TYPE_CHECKING:
    from execproto.netproxy import Brokered


class Refused(Exception):
    """The backend cannot run this request as asked (the message says what it cannot enforce)."""


class NoNetwork(Refused):
    """`session_socket`: this backend's sandboxes get no network of their own (no pasta, or
    the host's network), so a session has none to connect into."""


@attrs.frozen(kw_only=True, eq=False)  # never compared: an equality made at every start
class ExecSpec:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str
    arg0: str | None = None
    token: Any = None
    # Descriptors the command inherits at the same numbers; the driver closes them once the
    # spawn is done, whether or not it succeeded.
    pass_fds: tuple[int, ...] = ()
    # The managed network proxy's listeners, where the request has one (`SpawnSpec.proxy`):
    # the driver serves them from the spawn on (and closes them if it fails). A backend that
    # leaves them out where a proxy was asked for has the spawn refused.
    listeners: Listeners | None = None


@attrs.frozen(kw_only=True, eq=False)  # never compared, as ExecSpec
class Listeners:
    """A process's proxy listeners, bound and listening where the process reaches them."""

    http: socket.socket
    socks: socket.socket | None
    udp: bool  # SOCKS5 UDP associations allowed
    # Transparent TCP: where the namespace's rules send every other TCP connection, and
    # every DNS question (`_netns.Holder.redirect`).
    transparent: socket.socket | None = None
    dns: socket.socket | None = None
    # Credential masking: what the proxy brokers for this process (`_proxy._masking`).
    credentials: tuple[Brokered, ...] = ()

    def close(self) -> None:
        for sock in (self.http, self.socks, self.transparent, self.dns):
            if sock is not None:
                sock.close()


class Backend(Protocol):
    # What a process that ran with a sandbox reports as `sandboxType`: one of SANDBOX_TYPES,
    # "none" if this backend enforces no sandbox (then the core refuses requests for one).
    # A plain attribute will do, or a property.
    @property
    def sandbox_type(self) -> str: ...

    def prepare(self, request: SpawnSpec) -> ExecSpec: ...

    def finalize(self, token: Any, status: str, exit_code: int | None, timed_out: bool) -> None: ...


# The `sandboxType` values the Codex client can read; anything else fails its whole call.
SANDBOX_TYPES = ("none", "macosSeatbelt", "linuxSeccomp", "windowsRestrictedToken", "windowsMxc")
