"""Server settings and the facts about the host the core may not look up itself."""

from __future__ import annotations

import binascii
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import attrs

from ._paths import uri_from_path
from ._policy import Policy
from ._records import Record


def _paths(paths: Iterable[str]) -> tuple[str, ...]:
    # A function of ours, not ``tuple`` itself: attrs reads a converter's signature, and a
    # builtin's is parsed from text by `tokenize`, whose regular expressions took ~5 ms of
    # every server's start to compile.
    return tuple(paths)


# Standard base64, padded, without a newline: the stdlib's, and the default `Config.b64encode`.
b2a_base64: Callable[[bytes], bytes] = partial(binascii.b2a_base64, newline=False)


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Config(Record):
    """The server's settings: the bounds and timeouts the core keeps (see docs/design.md,
    Limits) and the operator's sandbox. ``execproto serve`` takes its flags' defaults from here."""

    session_ttl: float = 30.0  # seconds a detached session waits to be resumed
    retention_bytes: int = 1 << 20  # newest output kept per process
    # Also bound the chunk count, so a flood of 1-byte chunks cannot cost 100 bytes of bookkeeping
    # per byte of output.
    retention_chunks: int = 1 << 16
    kill_grace: float = 1.0  # seconds between TERM and KILL, and before abandoning held pipes
    closed_ttl: float = 30.0  # seconds a closed process stays readable
    # Output kept by closed processes, all of them together: past it, those closed longest ago
    # stop being readable before closed_ttl.
    max_closed_bytes: int = 128 << 20
    write_id_memory: int = 4096  # writeIds remembered per process
    # Stdin a process has been given and has not read: past it, a write waits unanswered until
    # the process reads (as much again may wait); past that, or past max_stdin_total for all
    # processes, a write is refused. So a process that never reads cannot fill the memory.
    max_stdin_backlog: int = 8 << 20
    max_stdin_total: int = 256 << 20
    max_fs_handles: int = 128  # open fs handles per connection
    # Processes not yet closed, per session and for the whole server: past them a start is
    # refused, so one client cannot take every pid and descriptor from the others.
    max_session_processes: int = 256
    max_processes: int = 1024
    # Sessions waiting, detached, to be resumed, for the whole server: past it the oldest
    # detached session of the address holding the most expires at once (see `_shares`), so
    # clients that come and go cannot fill the memory with sessions for a whole TTL.
    max_detached_sessions: int = 1024
    # Output held for detached sessions, all of them together (each log is bounded by
    # retention_bytes already): past it, every process of a detached session is paused until
    # its client comes back or the total falls, so many abandoned sessions cannot fill memory.
    max_held_bytes: int = 256 << 20
    # Connections that have not finished their websocket upgrade: each gets this many seconds,
    # and past this many at once a new one is closed on arrival, so half-open connections
    # cannot take every descriptor from the clients that finish theirs.
    handshake_timeout: float = 10.0
    max_upgrading: int = 64
    # Connections past their upgrade, for the whole server: past it a new one is closed at once
    # (1013, try again later), so connections cannot take the descriptors processes need, nor
    # the other way round (see _descriptors).
    max_connections: int = 256
    # Seconds a connection may stay blocked (more than the high-water mark waiting to be sent,
    # and its requests no longer read) before it is closed: its client reads nothing.
    send_timeout: float = 60.0
    # The operator's sandbox, the floor every client request is narrowed by (None: none).
    floor: Policy | None = None
    # The server's own files (its token file, its TLS key, its trace): denied in every sandbox,
    # to its processes and to fs calls that carry one, whatever the policy grants. Each file as
    # named and as resolved, and the directories that are the secrets' own; the adapter
    # resolves each name again at every use, so the file a rotation put there is the one
    # denied (docs/design.md, Sandboxes, rule 4).
    secrets: tuple[str, ...] = attrs.field(default=(), converter=_paths)  # a list from a trace
    # What the server runs or loads (its interpreter and environment, its code, the wrappers,
    # `--path-prepend`, a `--backend` module): read-only in every sandbox, whatever the policy
    # grants, so that nothing a sandbox writes runs outside it later.
    protected: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    # The `sandboxType` a sandboxed process reports: the wire name of what enforces policies
    # here ("linuxSeccomp" for bubblewrap, which is what the client knows it by), or "none"
    # when nothing can, and then a request for a sandbox is refused.
    sandbox_type: str = "none"
    # Directories at the front of PATH for the commands processes run (the operator's
    # `--path-prepend`, absolute paths): announced as `prependPathDirs` in the environment info,
    # and put before the server's own PATH where an env policy inherits it, as the reference does
    # with its own (see `inherited_environment`).
    path_prepend: tuple[str, ...] = attrs.field(default=(), converter=_paths)  # a list from a trace
    # Port forwarding (``forward/open``): streams open at once, per session and for the whole
    # server, so one session's flood cannot take every descriptor and turn from the others; and
    # whether a session whose sandboxes get no network of their own may reach the server host's
    # loopback instead (``--forward-loopback``; never the server's own ports).
    max_session_forwards: int = 64
    max_forwards: int = 1024
    forward_loopback: bool = False
    # What puts a process's output in base64 (standard alphabet, padded, no newline). The core
    # keeps to the stdlib; an adapter passes a faster encoder when it has one (pybase64's SIMD
    # runs some 50x binascii's, which was half of a stream's server time). The same bytes
    # either way, so it is no setting: not compared, not shown, not traced.
    b64encode: Callable[[bytes], bytes] = attrs.field(
        default=b2a_base64, eq=False, repr=False, metadata={"traced": False})


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Host(Record):
    """What the adapter learned about the machine at start-up."""

    # The ``environment/info`` result (also sent in the ``initialize`` result).
    environment_info: dict[str, Any] = attrs.field(factory=dict)
    # The server's own environment, for env policies that inherit from it.
    env: dict[str, str] = attrs.field(factory=dict)
    # The server's limit on open file descriptors (RLIMIT_NOFILE), shared out by _descriptors;
    # None: no limit is known, and none is kept.
    descriptor_limit: int | None = None


def announced_environment(config: Config, host: Host) -> dict[str, Any]:
    """The environment info clients are told: the host's, with the operator's PATH directories
    as file URIs in the order given. Without any, the host's own list stands (the adapter's is
    `[]`: the reference always sends the list, empty or not)."""
    if not config.path_prepend:
        return host.environment_info
    dirs = [uri_from_path(path) for path in config.path_prepend]
    return {**host.environment_info, "prependPathDirs": dirs}


def inherited_environment(config: Config, host: Host) -> dict[str, str]:
    """The server's environment as env policies inherit it: the host's, with the operator's
    PATH directories before its PATH. The reference's own (its bundled `rg`, the `apply_patch`
    alias) lead the PATH its processes inherit so, and the Codex CLI (0.171.0, probed) relies on
    that: it does not put `prependPathDirs` on PATH itself. A PATH in a request's env is left as
    given. Idempotent, since a trace records the result and its replay comes through here too."""
    prefix = ":".join(config.path_prepend)
    path = host.env.get("PATH", "")
    if not prefix or path == prefix or path.startswith(prefix + ":"):
        return host.env
    return {**host.env, "PATH": f"{prefix}:{path}" if path else prefix}
