"""The blocking filesystem work behind the core's `RunFs`, shared by every adapter.

Runs on a worker thread, never on the event loop. Errors carry the reference's codes: a missing
path is -32004, a refusal (not a regular file, a read denied, outside the roots) -32600, any
other OS error -32603 with the OS's own words. Nothing here ever blocks on a FIFO: files are
opened non-blocking and checked to be regular before a byte is read or written.
"""

from __future__ import annotations

import base64
import errno
import fnmatch
import os
import shutil
import stat
import threading
from collections.abc import Callable, Sequence
from typing import Any

from execproto import FsRequest, Policy, RpcError, uri_from_path
from execproto._policy import RANK

from . import _envconfig, _skills
from ._posix import os_error_text
from ._walk import walk

MAX_READ_FILE = 64 << 20  # fs/readFile answers in one message; bigger files go by fs/open


def _refused(message: str) -> RpcError:
    return RpcError(-32600, message)


def _os_error(exc: OSError) -> RpcError:
    if exc.errno == errno.ENOENT:
        return RpcError(-32004, os_error_text(exc))
    if exc.errno in (errno.EACCES, errno.EPERM):
        return RpcError(-32600, os_error_text(exc))
    return RpcError(-32603, os_error_text(exc))


# What each method needs of which path under a sandbox. A recursive call also needs it of
# everything beneath the path: no rule deeper down may grant less.
_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "fs/readFile": (("path", "read"),),
    "fs/writeFile": (("path", "write"),),
    "fs/createDirectory": (("path", "write"),),
    "fs/getMetadata": (("path", "read"),),
    "fs/canonicalize": (("path", "read"),),
    "fs/readDirectory": (("path", "read"),),
    "fs/remove": (("path", "write"),),
    "fs/copy": (("source", "read"), ("destination", "write")),
    "fs/walk": (("path", "read"),),
    "fs/open": (("path", "read"),),
    "fs/open replace": (("path", "write"),),
    "fs/writeBlock": (),  # checked when its handle was opened for replacing
}
_DENIED = {
    "read": RpcError(-32600, "Permission denied (os error 13)"),
    "write": RpcError(-32603, "Read-only file system (os error 30)"),
}


def _granted(policy: Policy, real: str) -> str:
    """The access ``policy`` grants a resolved path, deny patterns included."""
    if any(fnmatch.fnmatchcase(real, pattern) for pattern in policy.deny_globs):
        return "none"
    return policy.access(real)


def _within(policy: Policy, method: str, params: dict[str, Any]) -> None:
    """Refuse the call as the sandbox would: EACCES for a denied read, EROFS for a write where
    the policy grants none. Paths are checked as resolved through their symlinks."""
    recursive = params.get("recursive", False)
    if method == "fs/open" and params.get("mode") == "replace":
        method = "fs/open replace"
    for name, need in _NEEDS.get(method, ()):
        real = os.path.realpath(params[name])
        granted = _granted(policy, real)
        if recursive:
            deeper = [r.access for r in policy.rules if r.path.startswith(real.rstrip("/") + "/")]
            granted = min([granted, *deeper], key=RANK.__getitem__)
        if RANK[granted] < RANK[need]:
            raise _DENIED[need]


class Files:
    """Runs fs requests; holds the open ``fs/open`` handles of every connection."""

    def __init__(self, roots: Sequence[str] = ()) -> None:
        self._roots = [os.path.realpath(root) for root in roots]
        self._lock = threading.Lock()
        self._handles: dict[tuple[int, str], tuple[int, str]] = {}  # (conn, id) -> (fd, path)
        self._run: dict[str, Callable[[int, dict[str, Any]], Any]] = {
            "fs/readFile": self._read_file,
            "fs/writeFile": self._write_file,
            "fs/createDirectory": self._create_directory,
            "fs/getMetadata": self._get_metadata,
            "fs/canonicalize": self._canonicalize,
            "fs/readDirectory": self._read_directory,
            "fs/remove": self._remove,
            "fs/copy": self._copy,
            "fs/open": self._open,
            "fs/readBlock": self._read_block,
            "fs/writeBlock": self._write_block,
            "fs/close": self._close,
            "environmentConfig/read": lambda conn, p: _envconfig.read(p),
            "capabilities/discoverV2": lambda conn, p: _skills.discover_home(p),
            "capabilityRoots/discoverV1": lambda conn, p: _skills.discover_roots(p, self._check),
        }

    def run(self, conn: int, request: FsRequest) -> tuple[Any, RpcError | None]:
        """(result, None) or (None, error). Never raises for what the request did."""
        try:
            if request.sandbox is not None:
                _within(request.sandbox, request.method, request.params)
            if request.method == "fs/walk":
                return self._walk(request.params, request.sandbox), None
            return self._run[request.method](conn, request.params), None
        except RpcError as error:
            return None, error
        except OSError as exc:
            return None, _os_error(exc)

    def close_connection(self, conn: int) -> None:
        with self._lock:
            mine = [key for key in self._handles if key[0] == conn]
            fds = [self._handles.pop(key)[0] for key in mine]
        for fd in fds:
            os.close(fd)

    # -- confinement ----------------------------------------------------------------------------

    def _check(self, path: str, *, may_be_missing: bool = False) -> None:
        """Refuse a path that resolves (through any symlink or "..") outside the roots."""
        if not self._roots:
            return
        real = os.path.realpath(path)
        if may_be_missing and not os.path.lexists(path):
            real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if not self._inside(real):
            raise _refused(f"path `{path}` is outside the allowed roots")

    def _inside(self, real: str) -> bool:
        return any(real == root or real.startswith(root.rstrip("/") + "/") for root in self._roots)

    # -- whole files ----------------------------------------------------------------------------

    def _open_regular(self, path: str, flags: int) -> int:
        # 0o666: a file created here gets what the umask leaves of rw for all, like any program's.
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _refused(f"path `{path}` is not a file")
        os.set_blocking(fd, True)
        return fd

    def _walk(self, p: dict[str, Any], policy: Policy | None) -> Any:
        root = os.path.normpath(p["path"])
        self._check(root)
        if not self._roots and policy is None:
            return walk(root, p)

        def allowed(path: str) -> bool:
            real = os.path.realpath(path)
            if self._roots and not self._inside(real):
                return False
            return policy is None or _granted(policy, real) != "none"

        return walk(root, p, allowed)

    def _read_file(self, conn: int, p: dict[str, Any]) -> Any:
        self._check(p["path"])
        fd = self._open_regular(p["path"], os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > MAX_READ_FILE:
                raise _refused(
                    f"file `{p['path']}` is {size} bytes, over fs/readFile's limit of "
                    f"{MAX_READ_FILE}; read it with fs/open and fs/readBlock"
                )
            chunks = []
            while data := os.read(fd, 1 << 20):
                chunks.append(data)
                size -= len(data)
                if size < -(1 << 20):  # it grew while we read: stop at the limit's spirit
                    raise _refused(f"file `{p['path']}` grew past fs/readFile's limit while read")
        finally:
            os.close(fd)
        return {"dataBase64": base64.b64encode(b"".join(chunks)).decode("ascii")}

    def _write_file(self, conn: int, p: dict[str, Any]) -> Any:
        self._check(p["path"], may_be_missing=True)
        fd = self._open_regular(p["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            view = memoryview(p["data"])
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return {}

    # -- directories and metadata ---------------------------------------------------------------

    def _create_directory(self, conn: int, p: dict[str, Any]) -> Any:
        self._check(p["path"], may_be_missing=True)
        if p["recursive"]:
            os.makedirs(p["path"], exist_ok=True)
            if not os.path.isdir(p["path"]):
                raise OSError(errno.EEXIST, os.strerror(errno.EEXIST))
        else:
            os.mkdir(p["path"])
        return {}

    def _get_metadata(self, conn: int, p: dict[str, Any]) -> Any:
        self._check(p["path"])
        link = os.lstat(p["path"])
        info = os.stat(p["path"])
        return {
            "isDirectory": stat.S_ISDIR(info.st_mode),
            "isFile": stat.S_ISREG(info.st_mode),
            "isSymlink": stat.S_ISLNK(link.st_mode),
            "size": info.st_size,
            "createdAtMs": 0,  # Linux's stat has no birth time here; the reference says 0 too
            "modifiedAtMs": info.st_mtime_ns // 1_000_000,
        }

    def _canonicalize(self, conn: int, p: dict[str, Any]) -> Any:
        self._check(p["path"])
        return {"path": uri_from_path(os.path.realpath(p["path"], strict=True))}

    def _read_directory(self, conn: int, p: dict[str, Any]) -> Any:
        self._check(p["path"])
        entries = []
        with os.scandir(p["path"]) as listing:
            for entry in listing:
                try:  # follow symlinks, as the reference does; a broken one is left out
                    is_dir, is_file = entry.is_dir(), entry.is_file()
                    if entry.is_symlink():
                        os.stat(entry.path)
                except OSError:
                    continue
                entries.append({"fileName": entry.name, "isDirectory": is_dir, "isFile": is_file})
        return {"entries": entries}

    def _remove(self, conn: int, p: dict[str, Any]) -> Any:
        self._check(p["path"], may_be_missing=True)
        path = p["path"]
        if not os.path.lexists(path):
            if p["force"]:
                return {}
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        if os.path.isdir(path) and not os.path.islink(path):
            if p["recursive"]:
                shutil.rmtree(path)
            else:
                os.rmdir(path)
        else:
            os.unlink(path)
        return {}

    def _copy(self, conn: int, p: dict[str, Any]) -> Any:
        source, destination = p["source"], p["destination"]
        self._check(source)
        self._check(destination, may_be_missing=True)
        if os.path.isdir(source):
            if not p["recursive"]:
                raise _refused("fs/copy requires recursive: true when sourcePath is a directory")
            real_source = os.path.realpath(source)
            real_destination = os.path.realpath(destination)
            if real_destination == real_source or real_destination.startswith(real_source + "/"):
                raise _refused("fs/copy cannot copy a directory to itself or one of its descendants")
            shutil.copytree(source, destination, symlinks=True, dirs_exist_ok=True)
        else:
            os.stat(source)  # a missing source is ENOENT, not a copy of nothing
            shutil.copy2(source, destination)
        return {}

    # -- handles --------------------------------------------------------------------------------

    def _open(self, conn: int, p: dict[str, Any]) -> Any:
        if p["mode"] == "replace":
            # Truncated (or created) at once, in place: same inode and mode, links followed.
            self._check(p["path"], may_be_missing=True)
            fd = self._open_regular(p["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        else:
            self._check(p["path"])
            fd = self._open_regular(p["path"], os.O_RDONLY)
        with self._lock:
            self._handles[conn, p["handleId"]] = (fd, p["path"])
        return {"handleId": p["handleId"]}

    def _read_block(self, conn: int, p: dict[str, Any]) -> Any:
        with self._lock:
            found = self._handles.get((conn, p["handleId"]))
        if found is None:
            raise RpcError(-32004, f"unknown file handle `{p['handleId']}`")
        fd = found[0]
        data = os.pread(fd, p["len"], p["offset"])
        size = os.fstat(fd).st_size
        return {
            "chunk": base64.b64encode(data).decode("ascii"),
            "eof": p["offset"] + len(data) >= size,
        }

    def _write_block(self, conn: int, p: dict[str, Any]) -> Any:
        with self._lock:
            found = self._handles.get((conn, p["handleId"]))
        if found is None:
            raise RpcError(-32004, f"unknown file handle `{p['handleId']}`")
        view, offset = memoryview(p["data"]), p["offset"]
        while view:  # positional: blocks may come in any order, past the end leaves a hole
            written = os.pwrite(found[0], view, offset)
            view, offset = view[written:], offset + written
        return {}

    def _close(self, conn: int, p: dict[str, Any]) -> Any:
        with self._lock:
            found = self._handles.pop((conn, p["handleId"]), None)
        if found is not None:
            os.close(found[0])
        return {}
