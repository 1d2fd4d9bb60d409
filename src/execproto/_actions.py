"""Actions: what the adapter must do, in the order `ServerCore.handle` returns them."""

from __future__ import annotations

from typing import Any

import attrs

from ._policy import Policy


@attrs.frozen(kw_only=True)
class SpawnSpec:
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


@attrs.frozen(kw_only=True)
class Send:
    """Send one encoded JSON-RPC message (UTF-8 JSON, one frame or one line)."""

    conn: int
    data: bytes


@attrs.frozen(kw_only=True)
class CloseConnection:
    conn: int
    code: int
    reason: str


@attrs.frozen(kw_only=True)
class Spawn:
    """Start the process; answer with `ProcessSpawned` or `SpawnFailed` for the same ``proc``."""

    proc: int
    spec: SpawnSpec


@attrs.frozen(kw_only=True)
class WriteStdin:
    proc: int
    data: bytes


@attrs.frozen(kw_only=True)
class CloseStdin:
    proc: int


@attrs.frozen(kw_only=True)
class Signal:
    """Send a signal ("INT", "TERM" or "KILL") to the process group.

    The core emits it only while the group leader is unreaped and not yet observed to exit, so
    its pid and process group id cannot have been reused.
    """

    proc: int
    signal: str


@attrs.frozen(kw_only=True)
class PauseOutput:
    """Stop reading the process's output pipes (so the child blocks when they fill)."""

    proc: int


@attrs.frozen(kw_only=True)
class ResumeOutput:
    proc: int


@attrs.frozen(kw_only=True)
class Finalize:
    """The process is done: reap it, close whatever of its pipes is still open, release it.

    Emitted exactly once for every `Spawn`. ``status`` is "completed" (it ran, exited and was
    closed) or "failed" (it never ran; ``exit_code`` is None). ``timed_out`` says a server
    deadline ended it: the kill grace ran out, its pipes were abandoned, or its session expired.
    After this, events for ``proc`` still queued in the adapter are ignored by the core.
    """

    proc: int
    status: str
    exit_code: int | None
    timed_out: bool


@attrs.frozen(kw_only=True)
class FsRequest:
    """A validated filesystem call. Paths are native; ``params`` holds the method's own fields.

    ``sandbox``: the policy the call must stay within (the client's, narrowed by the
    operator's floor), or None for none. Reading where it denies is refused with EACCES,
    writing where it does not grant write with EROFS, as a sandboxed process would see.
    """

    method: str
    params: Any
    sandbox: Policy | None = None


@attrs.frozen(kw_only=True)
class RunFs:
    """Run a blocking filesystem call off the event loop; answer with `FsCompleted`.

    Besides ``fs/*``, ``request.method`` may be ``environmentConfig/read``,
    ``capabilities/discoverV2`` or ``capabilityRoots/discoverV1``: file reads about the
    executor's own setup, blocking in the same way.

    ``conn`` scopes ``fs/open`` handles; the adapter closes a connection's handles when it closes.
    """

    op: int
    conn: int
    request: FsRequest


@attrs.frozen(kw_only=True)
class WatchMissing:
    """Watch for any of ``missing`` to appear (or ``present`` to go); answer with `FsCompleted`
    for ``op``: ``{"watching": true}`` when every missing path is absent and ``present`` (if
    any) exists, else ``{"watching": false}`` and nothing more. A watch that holds reports
    `MissingChanged` once, for ``watch``, and is then over. Paths are native.

    ``sandbox``: the operator's floor (the call carries no sandbox of its own). A path outside
    what it and ``--fs-root`` allow is refused; one that leads outside through a symlink counts
    as missing, so a watch tells nothing about what exists out there."""

    op: int
    watch: int
    missing: tuple[str, ...]
    present: str | None
    sandbox: Policy | None = None


@attrs.frozen(kw_only=True)
class Unwatch:
    """Stop the watch (replaced, or its connection closed). Harmless if it already fired."""

    watch: int


@attrs.frozen(kw_only=True)
class HttpRequest:
    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    timeout_ms: int | None
    stream_response: bool
    follow_redirects: bool


@attrs.frozen(kw_only=True)
class RunHttp:
    """Perform an HTTP request; answer with `HttpResponded`, then (streaming) body events."""

    op: int
    request: HttpRequest


@attrs.frozen(kw_only=True)
class CancelHttp:
    op: int


Action = (
    Send
    | CloseConnection
    | Spawn
    | WriteStdin
    | CloseStdin
    | Signal
    | PauseOutput
    | ResumeOutput
    | Finalize
    | RunFs
    | WatchMissing
    | Unwatch
    | RunHttp
    | CancelHttp
)
