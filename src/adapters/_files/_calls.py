"""The blocking file work behind the core's `RunFs`, shared by every adapter: one function per
kind of request (`execproto.fs`), chosen by its class through `CALLS`.

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
import stat
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from execproto import INTERNAL_ERROR, INVALID_REQUEST, NOT_FOUND, Policy, RpcError, uri_from_path
from execproto.fs import (
    Canonicalize,
    Close,
    Copy,
    CreateDirectory,
    DiscoverRoots,
    DiscoverSkills,
    FsRequest,
    GetMetadata,
    Open,
    ReadBlock,
    ReadConfig,
    ReadDirectory,
    ReadFile,
    Remove,
    Walk,
    WriteBlock,
    WriteFile,
)
from execproto.policy import PlantedLink, crossing, refusal

from .._system import os_error_text, readlink
from ._beneath import Exhausted, Scope, resolved_policy
from ._caps import capless
from ._fs import MAX_READ_FILE, Files
from ._opening import NotAFile, open_checked
from ._walk import Abandoned, walk


def _late(name: str) -> Any:
    """This package's module ``name``, imported at the first call that needs it (the host's
    config and skills, and copying, are few clients' calls). Late imports come from the
    server's own files, which every sandbox holds read-only."""
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


def scope(files: Files, policy: Policy | None) -> Scope:
    """What a call with ``policy`` (the client's, narrowed by the floor) may touch."""
    try:
        resolved = None if policy is None else resolved_policy(policy, files.floor)
    except PlantedLink as exc:
        raise _refused(str(exc)) from None
    crossed = None if policy is None else crossing(policy, readlink, files.floor)
    if policy is None or crossed is None:
        return Scope(files.roots, resolved)
    return Scope(files.roots, resolved, unkept=refusal(*crossed),
                 unkept_for=("read", "write") if _reads_sandboxed(policy) else ("write",))


def run(files: Files, conn: int, request: FsRequest) -> tuple[Any, RpcError | None]:
    """(result, None) or (None, error). Never raises for what the request did. A call
    whose connection closed while it waited for the pool is not run: nobody would read
    its answer, and others wait behind it."""
    gone = RpcError(INTERNAL_ERROR, "the connection closed before the call ran")
    if not files.wanted(conn):
        return None, gone
    try:
        budgeted = scope(files, request.sandbox).budgeted()
        with capless() if budgeted.policy is not None else nullcontext():
            return CALLS[type(request)](files, conn, request, budgeted), None
    except Abandoned:  # a walk whose connection closed while it ran
        return None, gone
    except Exhausted as exc:  # the call's budgets (`_beneath.MAX_GLOB_CHECKS`, `CALL_SECONDS`)
        return None, exc.error
    except RpcError as error:
        return None, error
    except OSError as exc:
        return None, _os_error(exc)


# -- whole files --------------------------------------------------------------------------------

def _read_file(files: Files, conn: int, request: ReadFile, scope: Scope) -> Any:
    path = request.path
    fd = _open_regular(scope, path, os.O_RDONLY, "read")
    try:
        size = os.fstat(fd).st_size
        if size > MAX_READ_FILE:
            raise _refused(
                f"file `{path}` is {size} bytes, over fs/readFile's limit of "
                f"{MAX_READ_FILE}; read it with fs/open and fs/readBlock"
            )
        # One buffer, and the bytes let go before the text is made: a 16 MiB read peaked
        # at 76 MB (its pieces, their join, the base64 and its text), now at 44.
        data = bytearray()
        while piece := os.read(fd, 1 << 20):
            data += piece
            if len(data) > size + (1 << 20):  # it grew while read: the limit's spirit
                raise _refused(f"file `{path}` grew past fs/readFile's limit while read")
    finally:
        os.close(fd)
    encoded = base64.b64encode(data)
    del data
    return {"dataBase64": encoded.decode("ascii")}


def _write_file(files: Files, conn: int, request: WriteFile, scope: Scope) -> Any:
    fd = _open_regular(scope, request.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "write")
    try:
        view = memoryview(request.data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return {}


# -- directories and metadata -------------------------------------------------------------------

def _create_directory(files: Files, conn: int, request: CreateDirectory, scope: Scope) -> Any:
    if request.recursive:
        scope.makedirs(request.path)
        return {}
    directory, name, _ = scope.parent(request.path, "write")
    try:
        os.mkdir(name, 0o777, dir_fd=directory)
    finally:
        os.close(directory)
    return {}


def _get_metadata(files: Files, conn: int, request: GetMetadata, scope: Scope) -> Any:
    path = request.path
    fd, where = scope.open(path, os.O_PATH, "read")
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    # Resolved to its own path: no symlink was on it. Otherwise look at the name itself.
    link = False
    if not scope.confined:  # nothing to confine: the name itself, by path
        link = stat.S_ISLNK(os.lstat(path).st_mode)
    elif where != os.path.normpath(path):
        directory, name, _ = scope.parent(path, "read")
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


def _canonicalize(files: Files, conn: int, request: Canonicalize, scope: Scope) -> Any:
    fd, where = scope.open(request.path, os.O_PATH, "read")
    os.close(fd)
    if not scope.confined:
        where = os.path.realpath(request.path, strict=True)
    return {"path": uri_from_path(where)}


def _read_directory(files: Files, conn: int, request: ReadDirectory, scope: Scope) -> Any:
    fd, where = scope.open(request.path, os.O_RDONLY | os.O_DIRECTORY, "read")
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


def _remove(files: Files, conn: int, request: Remove, scope: Scope) -> Any:
    try:
        directory, name, real = scope.parent(request.path, "write", deep=request.recursive)
    except FileNotFoundError:
        if request.force:
            return {}
        raise
    try:
        kind = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
        if not stat.S_ISDIR(kind):
            os.unlink(name, dir_fd=directory)  # a symlink itself, never what it points to
        elif request.recursive:
            scope.check_tree(directory, name, [(real, "write")])
            import shutil  # (bz2, lzma: ~2 ms) where a tree is removed, not at the first call

            shutil.rmtree(name, dir_fd=directory)  # by descriptors: no symlink is followed
        else:
            os.rmdir(name, dir_fd=directory)
    except FileNotFoundError:
        if not request.force:
            raise
    finally:
        os.close(directory)
    return {}


def _copy(files: Files, conn: int, request: Copy, scope: Scope) -> Any:
    source, destination, recursive = request.source, request.destination, request.recursive
    try:
        fd, real = open_checked(scope, source, os.O_RDONLY, "read", deep=recursive,
                                kinds=(stat.S_IFREG, stat.S_IFDIR))
    except NotAFile:
        raise _refused(f"path `{source}` is not a file or a directory") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode) and not recursive:
            raise _refused("fs/copy requires recursive: true when sourcePath is a directory")
        directory, name, target = scope.parent(destination, "write", deep=recursive)
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


def _walk(files: Files, conn: int, request: Walk, scope: Scope) -> Any:
    return walk(request, scope, lambda: files.wanted(conn))


# -- handles ------------------------------------------------------------------------------------

def _open(files: Files, conn: int, request: Open, scope: Scope) -> Any:
    if request.mode == "replace":
        # Truncated (or created) at once, in place: same inode and mode, links followed.
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        fd = _open_regular(scope, request.path, flags, "write")
    else:
        fd = _open_regular(scope, request.path, os.O_RDONLY, "read")
    if not files.keep(conn, request.handle_id, fd, request.path):
        os.close(fd)
        raise RpcError(INTERNAL_ERROR, "the connection closed before the file was opened")
    return {"handleId": request.handle_id}


def _unknown(handle_id: str) -> RpcError:
    return RpcError(NOT_FOUND, f"unknown file handle `{handle_id}`")


def _read_block(files: Files, conn: int, request: ReadBlock, scope: Scope) -> Any:
    fd = files.handle(conn, request.handle_id)
    if fd is None:
        raise _unknown(request.handle_id)
    data = os.pread(fd, request.length, request.offset)
    return {
        "chunk": base64.b64encode(data).decode("ascii"),
        # Short of what was asked: as the reference says it, so a file whose size
        # tells nothing (/proc's say 0) is read to its end.
        "eof": len(data) < request.length,
    }


def _write_block(files: Files, conn: int, request: WriteBlock, scope: Scope) -> Any:
    fd = files.handle(conn, request.handle_id)
    if fd is None:
        raise _unknown(request.handle_id)
    view, offset = memoryview(request.data), request.offset
    while view:  # positional: blocks may come in any order, past the end leaves a hole
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
    return {}


def _close(files: Files, conn: int, request: Close, scope: Scope) -> Any:
    fd = files.forget(conn, request.handle_id)
    if fd is not None:
        os.close(fd)
    return {}


# -- the executor's own setup -------------------------------------------------------------------

def _read_config(files: Files, conn: int, request: ReadConfig, scope: Scope) -> Any:
    return _late("_envconfig").read(request, scope)


def _discover_skills(files: Files, conn: int, request: DiscoverSkills, scope: Scope) -> Any:
    return _late("_skills").discover_home(scope)


def _discover_roots(files: Files, conn: int, request: DiscoverRoots, scope: Scope) -> Any:
    return _late("_skills").discover_roots(request, files.scope)


# What carries out each kind of request.
CALLS: dict[type, Callable[[Files, int, Any, Scope], Any]] = {
    ReadFile: _read_file,
    WriteFile: _write_file,
    CreateDirectory: _create_directory,
    GetMetadata: _get_metadata,
    Canonicalize: _canonicalize,
    ReadDirectory: _read_directory,
    Walk: _walk,
    Remove: _remove,
    Copy: _copy,
    Open: _open,
    ReadBlock: _read_block,
    WriteBlock: _write_block,
    Close: _close,
    ReadConfig: _read_config,
    DiscoverSkills: _discover_skills,
    DiscoverRoots: _discover_roots,
}


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
