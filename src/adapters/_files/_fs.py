"""The blocking filesystem work behind the core's `RunFs`, shared by every adapter.

Runs on a worker thread, never on the event loop. Every path is opened through `_beneath.Scope`,
checked where it really leads; the operations then work on descriptors, never on paths again.
Errors carry the reference's codes: a missing path is -32004, a refusal (not a regular file, a
read denied, outside the roots) -32600, any other OS error -32603 with the OS's own words.
Nothing here ever blocks on a FIFO: files are opened non-blocking and checked to be regular
before a byte is read or written.
"""

from __future__ import annotations

import base64
import errno
import importlib
import os
import shutil
import stat
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from execproto import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    NOT_FOUND,
    FsRequest,
    Policy,
    RpcError,
    uri_from_path,
)
from execproto.policy import PlantedLink, crossing, refusal

from .._system import os_error_text, readlink
from ._beneath import Exhausted, Scope, resolved_policy
from ._caps import capless
from ._opening import NotAFile, open_checked
from ._walk import Abandoned, walk

MAX_READ_FILE = 64 << 20  # fs/readFile answers in one message; bigger files go by fs/open


def _late(name: str) -> Any:
    """This package's module ``name``, imported at the first call that needs it (the host's
    config and skills, and copying, are few clients' calls: a start skips them). Late imports
    come from the server's own files, which every sandbox holds read-only."""
    return importlib.import_module(f"{__package__}.{name}")


def _refused(message: str) -> RpcError:
    return RpcError(INVALID_REQUEST, message)


def _reads_sandboxed(policy: Policy) -> bool:
    """Whether the reference reads under ``policy`` in its sandbox, so that a sandbox it
    cannot set up fails its reads too: a root it may not read, or a path or pattern denied
    (the server's own secrets, `Policy.caps`, are execproto's, not the client's)."""
    capped = {cap.path for cap in policy.caps}
    return (policy.rules[0].access == "none" or bool(policy.deny_globs)
            or any(rule.access == "none" and rule.path not in capped for rule in policy.rules))


def _os_error(exc: OSError) -> RpcError:
    if exc.errno == errno.ENOENT:
        return RpcError(NOT_FOUND, os_error_text(exc))
    if exc.errno in (errno.EACCES, errno.EPERM):
        return RpcError(INVALID_REQUEST, os_error_text(exc))
    return RpcError(INTERNAL_ERROR, os_error_text(exc))


class Files:
    """Runs fs requests; holds the open ``fs/open`` handles of every connection.

    ``roots``: ``--fs-root``; ``floor``: the operator's sandbox, which the call's policy is
    narrowed by again once its rules are resolved through symlinks (as for a process)."""

    def __init__(self, roots: Sequence[str] = (), floor: Policy | None = None) -> None:
        self._roots = [os.path.realpath(root) for root in roots]
        self._floor = floor
        self._lock = threading.Lock()
        self._handles: dict[tuple[int, str], tuple[int, str]] = {}  # (conn, id) -> (fd, path)
        # Connections still there to read answers: a call whose connection closed while it
        # waited is not run, a walk stops, and an open that finished after it closes its
        # descriptor instead of keeping it for nobody. None: all are (no driver's peers).
        self._live: set[int] | None = None
        self._run: dict[str, Callable[[int, dict[str, Any], Scope], Any]] = {
            "fs/readFile": self._read_file,
            "fs/writeFile": self._write_file,
            "fs/createDirectory": self._create_directory,
            "fs/getMetadata": self._get_metadata,
            "fs/canonicalize": self._canonicalize,
            "fs/readDirectory": self._read_directory,
            "fs/remove": self._remove,
            "fs/copy": self._copy,
            "fs/walk": lambda conn, p, scope: walk(p["path"], p, scope,
                                                   lambda: self._wanted(conn)),
            "fs/open": self._open,
            "fs/readBlock": self._read_block,
            "fs/writeBlock": self._write_block,
            "fs/close": self._close,
            "environmentConfig/read": lambda conn, p, scope: _late("_envconfig").read(p, scope),
            "capabilities/discoverV2": lambda conn, p, scope: _late("_skills").discover_home(
                p, scope),
            "capabilityRoots/discoverV1": lambda conn, p, scope: _late("_skills").discover_roots(
                p, self.scope),
        }

    def scope(self, policy: Policy | None) -> Scope:
        """What a call with ``policy`` (the client's, narrowed by the floor) may touch."""
        try:
            resolved = None if policy is None else resolved_policy(policy, self._floor)
        except PlantedLink as exc:
            raise _refused(str(exc)) from None
        crossed = None if policy is None else crossing(policy, readlink, self._floor)
        if policy is None or crossed is None:
            return Scope(self._roots, resolved)
        return Scope(self._roots, resolved, unkept=refusal(*crossed),
                     unkept_for=("read", "write") if _reads_sandboxed(policy) else ("write",))

    def run(self, conn: int, request: FsRequest) -> tuple[Any, RpcError | None]:
        """(result, None) or (None, error). Never raises for what the request did. A call
        whose connection closed while it waited for the pool is not run: nobody would read
        its answer, and others wait behind it."""
        gone = RpcError(INTERNAL_ERROR, "the connection closed before the call ran")
        if not self._wanted(conn):
            return None, gone
        try:
            scope = self.scope(request.sandbox).budgeted()
            with capless() if scope.policy is not None else nullcontext():
                return self._run[request.method](conn, request.params, scope), None
        except Abandoned:  # a walk whose connection closed while it ran
            return None, gone
        except Exhausted as exc:  # the call's budgets (`_beneath.MAX_GLOB_CHECKS`, `CALL_SECONDS`)
            return None, exc.error
        except RpcError as error:
            return None, error
        except OSError as exc:
            return None, _os_error(exc)

    def _wanted(self, conn: int) -> bool:
        """Whether ``conn`` is still there to read an answer."""
        with self._lock:
            return self._live is None or conn in self._live

    def open_connection(self, conn: int) -> None:
        with self._lock:
            if self._live is None:
                self._live = set()
            self._live.add(conn)

    def close_connection(self, conn: int) -> None:
        with self._lock:
            if self._live is not None:
                self._live.discard(conn)
            mine = [key for key in self._handles if key[0] == conn]
            fds = [self._handles.pop(key)[0] for key in mine]
        for fd in fds:
            os.close(fd)

    # -- whole files ----------------------------------------------------------------------------

    def _read_file(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        fd = _open_regular(scope, p["path"], os.O_RDONLY, "read")
        try:
            size = os.fstat(fd).st_size
            if size > MAX_READ_FILE:
                raise _refused(
                    f"file `{p['path']}` is {size} bytes, over fs/readFile's limit of "
                    f"{MAX_READ_FILE}; read it with fs/open and fs/readBlock"
                )
            # One buffer, and the bytes let go before the text is made: a 16 MiB read peaked
            # at 76 MB (its pieces, their join, the base64 and its text), now at 44.
            data = bytearray()
            while piece := os.read(fd, 1 << 20):
                data += piece
                if len(data) > size + (1 << 20):  # it grew while read: the limit's spirit
                    raise _refused(f"file `{p['path']}` grew past fs/readFile's limit while read")
        finally:
            os.close(fd)
        encoded = base64.b64encode(data)
        del data
        return {"dataBase64": encoded.decode("ascii")}

    def _write_file(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        fd = _open_regular(scope, p["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "write")
        try:
            view = memoryview(p["data"])
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return {}

    # -- directories and metadata ---------------------------------------------------------------

    def _create_directory(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        if p["recursive"]:
            scope.makedirs(p["path"])
            return {}
        directory, name, _ = scope.parent(p["path"], "write")
        try:
            os.mkdir(name, 0o777, dir_fd=directory)
        finally:
            os.close(directory)
        return {}

    def _get_metadata(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        fd, where = scope.open(p["path"], os.O_PATH, "read")
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        # Resolved to its own path: no symlink was on it. Otherwise look at the name itself.
        link = False
        if not scope.confined:  # nothing to confine: the name itself, by path
            link = stat.S_ISLNK(os.lstat(p["path"]).st_mode)
        elif where != os.path.normpath(p["path"]):
            directory, name, _ = scope.parent(p["path"], "read")
            try:
                link = stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
            finally:
                os.close(directory)
        return {
            "isDirectory": stat.S_ISDIR(info.st_mode),
            "isFile": stat.S_ISREG(info.st_mode),
            "isSymlink": link,
            "size": info.st_size,
            "createdAtMs": 0,  # Linux's stat has no birth time here; the reference says 0 too
            "modifiedAtMs": info.st_mtime_ns // 1_000_000,
        }

    def _canonicalize(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        fd, where = scope.open(p["path"], os.O_PATH, "read")
        os.close(fd)
        if not scope.confined:
            where = os.path.realpath(p["path"], strict=True)
        return {"path": uri_from_path(where)}

    def _read_directory(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        fd, where = scope.open(p["path"], os.O_RDONLY | os.O_DIRECTORY, "read")
        entries = []
        try:
            with os.scandir(fd) as listing:
                for entry in listing:
                    kind = _kind(scope, where, entry)
                    if kind is None:
                        continue  # a broken symlink, or one leading where the call may not look
                    entries.append({"fileName": display_name(entry.name),
                                    "isDirectory": stat.S_ISDIR(kind),
                                    "isFile": stat.S_ISREG(kind)})
        finally:
            os.close(fd)
        return {"entries": entries}

    def _remove(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        try:
            directory, name, real = scope.parent(p["path"], "write", deep=p["recursive"])
        except FileNotFoundError:
            if p["force"]:
                return {}
            raise
        try:
            kind = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(kind):
                os.unlink(name, dir_fd=directory)  # a symlink itself, never what it points to
            elif p["recursive"]:
                scope.check_tree(directory, name, [(real, "write")])
                shutil.rmtree(name, dir_fd=directory)  # by descriptors: no symlink is followed
            else:
                os.rmdir(name, dir_fd=directory)
        except FileNotFoundError:
            if not p["force"]:
                raise
        finally:
            os.close(directory)
        return {}

    def _copy(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        source, destination = p["source"], p["destination"]
        try:
            fd, real = open_checked(scope, source, os.O_RDONLY, "read", deep=p["recursive"],
                                    kinds=(stat.S_IFREG, stat.S_IFDIR))
        except NotAFile:
            raise _refused(f"path `{source}` is not a file or a directory") from None
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode) and not p["recursive"]:
                raise _refused("fs/copy requires recursive: true when sourcePath is a directory")
            directory, name, target = scope.parent(destination, "write", deep=p["recursive"])
            try:
                if stat.S_ISDIR(info.st_mode):
                    if target == real or target.startswith(real.rstrip("/") + "/"):
                        raise _refused(
                            "fs/copy cannot copy a directory to itself or one of its descendants")
                    scope.check_tree(fd, ".", [(real, "read"), (target, "write")])
                    _late("_copy").copy_tree(scope, fd, real, directory, name, target)
                else:
                    _late("_copy").copy_file(fd, info, directory, name, target, source)
            finally:
                os.close(directory)
        finally:
            os.close(fd)
        return {}

    # -- handles --------------------------------------------------------------------------------

    def _open(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        if p["mode"] == "replace":
            # Truncated (or created) at once, in place: same inode and mode, links followed.
            fd = _open_regular(scope, p["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "write")
        else:
            fd = _open_regular(scope, p["path"], os.O_RDONLY, "read")
        with self._lock:
            kept = self._live is None or conn in self._live
            if kept:
                self._handles[conn, p["handleId"]] = (fd, p["path"])
        if not kept:
            os.close(fd)
            raise RpcError(INTERNAL_ERROR, "the connection closed before the file was opened")
        return {"handleId": p["handleId"]}

    def _read_block(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        with self._lock:
            found = self._handles.get((conn, p["handleId"]))
        if found is None:
            raise RpcError(NOT_FOUND, f"unknown file handle `{p['handleId']}`")
        fd = found[0]
        data = os.pread(fd, p["len"], p["offset"])
        return {
            "chunk": base64.b64encode(data).decode("ascii"),
            # Short of what was asked: as the reference says it, so a file whose size
            # tells nothing (/proc's say 0) is read to its end.
            "eof": len(data) < p["len"],
        }

    def _write_block(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        with self._lock:
            found = self._handles.get((conn, p["handleId"]))
        if found is None:
            raise RpcError(NOT_FOUND, f"unknown file handle `{p['handleId']}`")
        view, offset = memoryview(p["data"]), p["offset"]
        while view:  # positional: blocks may come in any order, past the end leaves a hole
            written = os.pwrite(found[0], view, offset)
            view, offset = view[written:], offset + written
        return {}

    def _close(self, conn: int, p: dict[str, Any], scope: Scope) -> Any:
        with self._lock:
            found = self._handles.pop((conn, p["handleId"]), None)
        if found is not None:
            os.close(found[0])
        return {}


def _open_regular(scope: Scope, path: str, flags: int, need: str) -> int:
    """A regular file opened (a device or FIFO is refused before it is opened: `_opening`)."""
    try:
        return open_checked(scope, path, flags, need)[0]
    except NotAFile:
        raise _refused(f"path `{path}` is not a file") from None


def display_name(name: str) -> str:
    """A directory entry's name for fs/readDirectory: bytes that are not UTF-8 become U+FFFD,
    as the reference makes them (a JSON string cannot carry them; fs/walk's URIs can)."""
    return os.fsencode(name).decode("utf-8", "replace")


def _kind(scope: Scope, where: str, entry: os.DirEntry[str]) -> int | None:
    """The entry's file type, a symlink's taken from its target as the reference does, if the
    call may look there; None for a broken symlink or one leading out."""
    if not entry.is_symlink():
        return entry.stat(follow_symlinks=False).st_mode
    try:
        fd, _ = scope.open(os.path.join(where, entry.name), os.O_PATH, "read")
    except (OSError, RpcError):
        return None
    try:
        return os.fstat(fd).st_mode
    finally:
        os.close(fd)
