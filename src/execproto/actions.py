"""Actions: what the adapter must do, in the order `ServerCore.handle` returns them.

Every action is an instance of a subclass of `Action`; `ACTION_TYPES` lists them all, in the
order they are defined here (then those of the families made at their first use: the file
calls', `_fs_actions`, forwarding's, `_forward_actions`, and http's), and is derived from the
classes. `SpawnSpec`, `FsRequest` and
`HttpRequest` are not actions but what `Spawn`, `RunFs` and `RunHttp` carry.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Literal

import attrs

from ._policy import Policy
from ._records import Record, later_names

if TYPE_CHECKING:
    # Only fields' types: the proxy's policy and the shell snapshots' module are loaded at the
    # first start that asks for each.
    from ._netproxy import ProxyConfig
    from ._snapshot import ShellSnapshot

__all__ = [
    "ACTION_TYPES",
    "Action",
    "AnswerProxy",
    "CancelHttp",
    "CloseCode",
    "CloseConnection",
    "CloseForward",
    "CloseStdin",
    "EndSession",
    "Finalize",
    "FinalizeStatus",
    "ForwardRoute",
    "FsRequest",
    "HttpRequest",
    "OpenForward",
    "PauseForward",
    "PauseOutput",
    "ResizeTerminal",
    "ResumeForward",
    "ResumeOutput",
    "RunFs",
    "RunHttp",
    "Send",
    "Signal",
    "SignalName",
    "Spawn",
    "SpawnSpec",
    "Unwatch",
    "WatchMissing",
    "WriteForward",
    "WriteStdin",
]

# The signals the core sends a process group: "INT" (``process/signal`` with "interrupt"), then
# "TERM" and "KILL" (``process/terminate``, a session's expiry, `Shutdown`).
SignalName = Literal["INT", "TERM", "KILL"]

# How a process ended, for `Finalize`.
FinalizeStatus = Literal["completed", "failed"]


class CloseCode(enum.IntEnum):
    """The websocket close codes execproto sends (RFC 6455 and IANA's registry), named as
    wsproto's `CloseReason` names them: the core's in `CloseConnection`, the adapters' own
    (a normal close, an internal error, a protocol error or message too big in the framing)
    from the same list. A code's name, lower case, is its metrics label."""

    NORMAL_CLOSURE = 1000
    GOING_AWAY = 1001  # the server stops or drains
    PROTOCOL_ERROR = 1002  # the client broke the protocol
    POLICY_VIOLATION = 1008  # no initialize in time; pings too often
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011  # the server's bug: its core failed, or an action could not be done
    TRY_AGAIN_LATER = 1013  # no room: too many connections


class Action(Record):
    """The base class of every action. The core returns only its subclasses."""

    __slots__ = ()


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class SpawnSpec(Record):
    """What to run. ``cwd`` is a native path; ``env`` is the child's whole environment."""

    argv: tuple[str, ...]
    arg0: str | None
    cwd: str
    env: tuple[tuple[str, str], ...]
    tty: bool
    pipe_stdin: bool
    # Who asked, for backends that label or account for what they run.
    session_id: str
    process_id: str
    # The sandbox to run it in (the client's request narrowed by the operator's floor), or
    # None for none. A backend that cannot enforce it must refuse the spawn.
    sandbox: Policy | None = None
    # A tty's first size, (rows, columns), each 1..65535; None for 24 rows of 80 (execproto's
    # extension: ``rows`` and ``cols`` on ``process/start``). Always None without ``tty``.
    terminal_size: tuple[int, int] | None = None
    # The managed network proxy to launch for it (``networkProxy``): its listeners, whose
    # every connection is a `ProxyAsked`, and their variables in the environment
    # (`execproto._netproxy.proxy_env`). With a sandbox, the proxy is all of its network: a
    # namespace of its own with nothing but loopback and the listeners. Without one, the
    # variables are advice, as the reference's are.
    proxy: ProxyConfig | None = None
    # Run from the shell snapshot of its scope (``shellSnapshot``): the adapter captures the
    # login shell's state once per `ShellSnapshot.key`, under this same sandbox, and runs the
    # command from it without the profile (`execproto.snapshot`); as sent if no capture works.
    snapshot: ShellSnapshot | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False)
class Send(Action):
    """Send one encoded JSON-RPC message (UTF-8 JSON, one frame or one line)."""

    conn: int
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class CloseConnection(Action):
    """Close the connection with a websocket close ``code`` and ``reason`` (stdio: just close),
    then report `ConnectionClosed` as for any other close. Messages that arrive in between are
    ignored."""

    conn: int
    code: int  # a `CloseCode`
    reason: str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Spawn(Action):
    """Start the process; answer with `ProcessSpawned` or `SpawnFailed` for the same ``proc``."""

    proc: int
    spec: SpawnSpec


@attrs.frozen(kw_only=True, repr=False, eq=False)
class WriteStdin(Action):
    """Write ``data`` to the process's stdin (its terminal, for a tty process), in order."""

    proc: int
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class CloseStdin(Action):
    """Close the process's stdin, so it reads EOF."""

    proc: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Signal(Action):
    """Send a signal ("INT", "TERM" or "KILL") to the process group.

    The core emits it only while the group leader is unreaped and not yet observed to exit, so
    its pid and process group id cannot have been reused.
    """

    proc: int
    signal: SignalName


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ResizeTerminal(Action):
    """Set the size of the process's terminal (TIOCSWINSZ on the pty's master side), so the
    kernel sends SIGWINCH to its foreground process group. ``rows`` and ``cols`` are 1..65535.

    Only for a ``tty`` process, and only while it runs: after the exit nothing is resized, as
    nothing is signalled (``process/resize``, execproto's extension).
    """

    proc: int
    rows: int
    cols: int


@attrs.frozen(kw_only=True, repr=False, eq=False)
class PauseOutput(Action):
    """Stop reading the process's output pipes (so the child blocks when they fill)."""

    proc: int


@attrs.frozen(kw_only=True, repr=False, eq=False)
class ResumeOutput(Action):
    """Read the process's output pipes again, after a `PauseOutput`."""

    proc: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Finalize(Action):
    """The process is done: reap it, close whatever of its pipes is still open, release it.

    Emitted exactly once for every `Spawn`. ``status`` is "completed" (it ran, exited and was
    closed) or "failed" (it never ran; ``exit_code`` is None). ``timed_out`` says a server
    deadline ended it: the kill grace ran out, its pipes were abandoned, or its session expired.
    After this, events for ``proc`` still queued in the adapter are ignored by the core.
    """

    proc: int
    status: FinalizeStatus
    exit_code: int | None
    timed_out: bool


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class AnswerProxy(Action):
    """The answer to a `ProxyAsked`: let the connection through (to the addresses it asked
    with, and no other), or refuse it with ``refusal`` (an HTTP status, headers and body, for
    the HTTP listener) or ``socks_code`` (the SOCKS5 reply)."""

    ask: int
    allow: bool
    refusal: tuple[int, tuple[tuple[str, str], ...], bytes] | None = None
    socks_code: int = 0


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class EndSession(Action):
    """The session is gone (it expired, or its client ended it): what the adapter keeps for it
    may go, such as the network its sandboxes share. Its processes were told to stop just
    before; some may still be finishing."""

    session_id: str
    ended: bool = False  # by its client (``session/end``), not at its TTL


# The actions of the families few clients use are made at their first use, as their events
# are (see `events`): each is found in its module when it is first asked for here.
_LATER = {
    **dict.fromkeys(("RunFs", "Unwatch", "WatchMissing"), "_fs_actions"),
    "FsRequest": "fs",
    **dict.fromkeys(("CloseForward", "ForwardRoute", "OpenForward", "PauseForward",
                     "ResumeForward", "WriteForward"), "_forward_actions"),
    **dict.fromkeys(("CancelHttp", "HttpRequest", "RunHttp"), "_http_actions"),
}

if TYPE_CHECKING:
    from ._forward_actions import CloseForward as CloseForward
    from ._forward_actions import ForwardRoute as ForwardRoute
    from ._forward_actions import OpenForward as OpenForward
    from ._forward_actions import PauseForward as PauseForward
    from ._forward_actions import ResumeForward as ResumeForward
    from ._forward_actions import WriteForward as WriteForward
    from ._fs_actions import RunFs as RunFs
    from ._fs_actions import Unwatch as Unwatch
    from ._fs_actions import WatchMissing as WatchMissing
    from ._http_actions import CancelHttp as CancelHttp
    from ._http_actions import HttpRequest as HttpRequest
    from ._http_actions import RunHttp as RunHttp
    from .fs import FsRequest as FsRequest

    # Every action class: those defined above, then those made later.
    ACTION_TYPES: tuple[type[Action], ...]


__getattr__ = later_names(globals(), _LATER, Action, "ACTION_TYPES")
