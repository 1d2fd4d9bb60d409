"""Shell snapshots: the captures, and the few kept (``SpawnSpec.snapshot``; `execproto.snapshot`).

A start whose spec carries a snapshot waits here before its spawn. If its key has a capture,
it runs from it (`replay_spec`); if not, a capture starts, and the start (with any other of the
same key that comes meanwhile) waits for that one capture. A capture that fails, for whatever
reason, lets its starts run as sent; a start at least RETRY_SECONDS later tries again, at most
MAX_ATTEMPTS times per key while the key is kept.

A capture is a process like the command's, through the same backend, sandbox and cgroup
(`capture_spec`): what it reports comes from inside the sandbox and is replayed only under a
sandbox of the same key. It is bounded: its output to MAX_CAPTURE_BYTES (past that it is
killed), its time to CAPTURE_SECONDS (then it is killed), and it ends when its shell exits
(whatever the profile left running goes with the shell's cgroup). Nothing of it blocks: its
sandbox is prepared on the sandbox workers as a start's is, its pipes and exit are watched on
the loop, and a timer kills it.
"""

from __future__ import annotations

import functools
import logging
import os
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from execproto import Spawn
from execproto.snapshot import (
    CAPTURE_SECONDS,
    MAX_ATTEMPTS,
    MAX_CACHED,
    MAX_CAPTURE_BYTES,
    MAX_SESSION_CACHED,
    RETRY_SECONDS,
    Captured,
    capture_spec,
    read_capture,
    replay_spec,
)

from .._loop import Loop
from . import _posix

log = logging.getLogger("execproto")

READ_SIZE = 64 << 10
Proceed = Callable[[Spawn], None]


class Room(Protocol):
    """What a capture needs of the processes room (`_children.Children`): a spawn's cgroup,
    launch and sandbox workers, and the backend's finalize, as a command's."""

    tree: Any  # a `_cgroups.Tree` or `NoTree`

    @property
    def prep(self) -> Any: ...
    def launch(self, action: Spawn, place: str | None) -> tuple[Any, Any]: ...
    def failed(self) -> bool: ...
    def finalize_backend(self, proc: int, token: Any, status: str, exit_code: int | None,
                         timed_out: bool, session_id: str, report: bool = True) -> None: ...


@attrs.define
class _Entry:
    """One key's captures: the one that worked, or when the last failed, or the starts waiting
    for the one running (None: none runs)."""

    session_id: str
    attempts: int = 1
    captured: Captured | None = None
    retry_at: float = 0.0
    waiting: list[tuple[Spawn, Proceed]] | None = None


@attrs.define
class _Capture:
    """A capture running: its process and what it wrote so far."""

    entry: _Entry
    action: Spawn  # the capture's own spawn (a negative proc: none of the core's)
    token: Any = None
    child: _posix.Child | None = None
    output: bytearray = attrs.Factory(bytearray)
    began: float = 0.0
    cancel_timer: Callable[[], None] | None = None
    done: bool = False


class Snapshots:
    def __init__(self, loop: Loop, children: Room) -> None:
        self.loop = loop
        self._children = children
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._running: dict[int, _Capture] = {}
        self._next = -1  # captures' handles: negative, apart from the core's

    # -- a start --------------------------------------------------------------------------------

    def prepare(self, action: Spawn, proceed: Proceed) -> None:
        """Call ``proceed`` with the spawn to run for ``action``: from its key's capture, or as
        sent (now, or once the capture it waits for has ended)."""
        snapshot = action.spec.snapshot
        assert snapshot is not None
        entry = self._entries.pop(snapshot.key, None)
        now = self.loop.now()
        start = entry is None
        if entry is None:
            entry = _Entry(session_id=action.spec.session_id)
        elif (entry.captured is None and entry.waiting is None
              and entry.attempts < MAX_ATTEMPTS and now >= entry.retry_at):
            entry.attempts += 1
            start = True
        self._entries[snapshot.key] = entry
        self._evict(entry.session_id)
        if start:
            entry.waiting = []
        if entry.waiting is not None:
            entry.waiting.append((action, proceed))
        else:
            proceed(_replayed(action, entry.captured))
        if start:
            self._capture(entry, action)

    def _evict(self, session_id: str) -> None:
        """Keep the cache within its bounds: a session over its share gives up its least
        recently used, and a full cache the least recently used of the session holding the
        most. A capture still running goes on for the starts waiting on it."""
        def oldest_of(owner: str) -> str:
            return next(key for key, entry in self._entries.items() if entry.session_id == owner)

        held = Counter(entry.session_id for entry in self._entries.values())
        if held[session_id] > MAX_SESSION_CACHED:
            del self._entries[oldest_of(session_id)]
        while len(self._entries) > MAX_CACHED:
            held = Counter(entry.session_id for entry in self._entries.values())
            del self._entries[oldest_of(held.most_common(1)[0][0])]

    def forget(self, session_id: str) -> None:
        """The session is gone: so are its captures (none can serve another session)."""
        for key in [key for key, entry in self._entries.items() if entry.session_id == session_id]:
            del self._entries[key]

    # -- a capture ------------------------------------------------------------------------------

    def _capture(self, entry: _Entry, action: Spawn) -> None:
        proc = self._next
        self._next -= 1
        capture = _Capture(entry=entry, action=Spawn(proc=proc, spec=capture_spec(action.spec)),
                           began=self.loop.now())
        self._running[proc] = capture
        capture.cancel_timer = self.loop.call_at(capture.began + CAPTURE_SECONDS,
                                                 lambda: self._end(capture, "it took too long"))
        children = self._children
        try:
            place = children.tree.place(proc)
        except OSError as exc:  # out of cgroups, or of memory
            self._end(capture, _posix.os_error_text(exc))
            return
        if capture.action.spec.sandbox is None:
            self._launched(capture, children.launch(capture.action, place))
            return
        children.prep.submit(action.spec.session_id,
                             lambda: children.launch(capture.action, place),
                             lambda launched: self._launched(capture, launched))

    def _launched(self, capture: _Capture, launched: tuple[Any, Any]) -> None:
        prepared, child = launched
        if isinstance(prepared, BaseException):
            self._end(capture, f"{type(prepared).__name__}: {prepared}")
            return
        capture.token = prepared.token
        if getattr(prepared, "listeners", None) is not None:
            prepared.listeners.close()  # the capture asked for no proxy: nothing connects
        if isinstance(child, _posix.Child):
            capture.child = child
        if capture.done:  # it took too long to start, or the server stopped: it ends here
            self._stop(capture)
            return
        if capture.child is None:
            self._end(capture, str(child))
            return
        if self._children.failed():
            self._end(capture, "the server stopped")
            return
        proc = capture.action.proc
        child = capture.child
        self.loop.watch_read(child.pidfd, lambda: self._exited(capture))
        for stream, fd in child.outputs.items():
            self.loop.watch_read(fd, functools.partial(self._on_readable, capture, fd,
                                                       stream == "stdout"))
        log.debug("shell snapshot capture %d started: pid %d", proc, child.pid)

    def _on_readable(self, capture: _Capture, fd: int, kept: bool) -> None:
        self._read(capture, fd, kept)

    def _read(self, capture: _Capture, fd: int, kept: bool) -> bool:
        """One read of the capture's stdout (``kept``) or stderr (dropped); True if it got
        data."""
        child = capture.child
        if capture.done or child is None or fd not in child.outputs.values():
            return False
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.loop.unwatch_read(fd)
            for stream, open_fd in list(child.outputs.items()):
                if open_fd == fd:
                    del child.outputs[stream]
            _posix.close_quietly(fd)
            return False
        if kept:
            capture.output += data
            if len(capture.output) > MAX_CAPTURE_BYTES:
                self._end(capture, f"it wrote more than {MAX_CAPTURE_BYTES} bytes")
                return False
        return True

    def _exited(self, capture: _Capture) -> None:
        child = capture.child
        if capture.done or child is None:
            return
        status = child.exit_status()
        if status is None:
            return
        # What the shell wrote before it exited is in the pipe: take it all (bounded by the
        # output's own bound), not waiting for an end of file that what the profile left
        # running could hold back.
        stdout = child.outputs.get("stdout")
        while stdout is not None and self._read(capture, stdout, kept=True):
            pass
        if capture.done:
            return
        if status != 0:
            self._end(capture, f"its shell exited with status {status}")
            return
        captured = read_capture(bytes(capture.output))
        self._end(capture, "its output is not a complete capture" if captured is None else None,
                  captured)

    def _end(self, capture: _Capture, failure: str | None,
             captured: Captured | None = None) -> None:
        """The capture is over: its process and sandbox go, and its starts proceed."""
        if capture.done:
            return
        capture.done = True
        proc = capture.action.proc
        self._running.pop(proc, None)
        if capture.cancel_timer is not None:
            capture.cancel_timer()
        self._stop(capture)
        entry = capture.entry
        took = self.loop.now() - capture.began
        spec = capture.action.spec
        if failure is None:
            entry.captured = captured
            log.info("shell snapshot captured for process %s: %d bytes, %.1f s", spec.process_id,
                     len(capture.output), took,
                     extra={"fields": {"process": spec.process_id, "session": spec.session_id,
                                       "bytes": len(capture.output), "seconds": round(took, 3)}})
        else:
            entry.retry_at = self.loop.now() + RETRY_SECONDS
            log.info("shell snapshot not captured for process %s (attempt %d of %d): %s; it "
                     "runs as sent", spec.process_id, entry.attempts, MAX_ATTEMPTS, failure,
                     extra={"fields": {"process": spec.process_id, "session": spec.session_id,
                                       "failure": failure}})
        waiting, entry.waiting = entry.waiting or [], None
        for action, proceed in waiting:
            proceed(_replayed(action, entry.captured))

    def _stop(self, capture: _Capture) -> None:
        """Kill what is left of the capture (its shell's group and cgroup), reap it, and let the
        backend release its sandbox."""
        children = self._children
        proc = capture.action.proc
        child = capture.child
        if child is not None:
            self.loop.unwatch_read(child.pidfd)
            for fd in child.outputs.values():
                self.loop.unwatch_read(fd)
            if not child.reaped:
                child.signal_group("KILL")
            child.reap()
        children.tree.signalled(proc, "KILL")
        children.tree.finished(proc)
        if capture.token is not None:
            children.finalize_backend(proc, capture.token, "completed", None, False,
                                      capture.action.spec.session_id, report=False)

    def stop_all(self) -> None:
        """The server is stopping: every capture ends now, not when its time is up, and the
        starts waiting on it run as sent (and are ended by the stop, as every process is)."""
        for capture in list(self._running.values()):
            self._end(capture, "the server is stopping")

    def kill_all(self) -> None:
        """The core failed: no capture may outlive it (its starts are not spawned)."""
        for capture in list(self._running.values()):
            capture.entry.waiting = []
            self._end(capture, "the server stopped")


def _replayed(action: Spawn, captured: Captured | None) -> Spawn:
    """``action`` from ``captured``, or as sent without one."""
    spec = action.spec
    if captured is None:
        return Spawn(proc=action.proc, spec=attrs.evolve(spec, snapshot=None))
    return Spawn(proc=action.proc, spec=replay_spec(spec, captured))

