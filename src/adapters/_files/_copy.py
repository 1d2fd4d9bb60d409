"""``fs/copy`` by descriptors: nothing at the destination is ever followed.

The source is read through descriptors opened without following (its symlinks are copied as
symlinks, their text unchanged); every directory and file at the destination is made or opened
with O_NOFOLLOW beneath the destination's own descriptor, so a symlink there, planted before or
swapped in during the copy, stops the copy instead of carrying a write elsewhere.
"""

from __future__ import annotations

import errno
import os
import stat

from execproto import INVALID_REQUEST, RpcError

from ._beneath import Scope

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 24


def _through_link(path: str) -> RpcError:
    return RpcError(INVALID_REQUEST, f"fs/copy will not write through the symlink at `{path}`")


def _is_link(directory: int, name: str) -> bool:
    return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)


def copy_file(source: int, info: os.stat_result, directory: int, name: str, target: str,
              shown: str) -> None:
    """Copy the open regular file ``source`` to ``name`` in ``directory``, with its permission
    bits (setuid and the like dropped) and modification time."""
    if not stat.S_ISREG(info.st_mode):
        raise RpcError(INVALID_REQUEST, f"path `{shown}` is not a file")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o600, dir_fd=directory)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _through_link(target) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RpcError(INVALID_REQUEST, f"path `{target}` is not a file")
        os.set_blocking(fd, True)
        while os.sendfile(fd, source, None, _CHUNK):
            pass
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o777)
        os.utime(fd, ns=(info.st_atime_ns, info.st_mtime_ns))
    finally:
        os.close(fd)


def copy_tree(scope: Scope, source: int, real: str, directory: int, name: str,
              target: str) -> None:
    """Copy the directory open as ``source`` (real path ``real``) to ``name`` in ``directory``
    (real path ``target``), merging into a directory already there, as the reference does."""
    try:
        os.mkdir(name, 0o700, dir_fd=directory)
    except FileExistsError:
        pass
    try:
        made = os.open(name, _DIR, dir_fd=directory)
    except OSError as exc:  # a symlink there: ELOOP, or ENOTDIR since O_DIRECTORY is checked first
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(directory, name)):
            raise _through_link(target) from None
        raise
    try:
        with os.scandir(source) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            _copy_entry(scope, source, real, entry, made, target)
        os.fchmod(made, stat.S_IMODE(os.fstat(source).st_mode) & 0o777)
    finally:
        os.close(made)


def _copy_entry(scope: Scope, source: int, real: str, entry: os.DirEntry[str], made: int,
                target: str) -> None:
    here, there = os.path.join(real, entry.name), os.path.join(target, entry.name)
    scope.check(here, here, "read")  # deny patterns, and rules deeper than the call's path
    scope.check(there, there, "write")
    kind = entry.stat(follow_symlinks=False).st_mode
    if stat.S_ISLNK(kind):
        os.symlink(os.readlink(entry.name, dir_fd=source), entry.name, dir_fd=made)
        return
    if not (stat.S_ISDIR(kind) or stat.S_ISREG(kind)):
        raise RpcError(INVALID_REQUEST,
                       f"fs/copy cannot copy `{here}`: not a file, directory or symlink")
    flags = _DIR if stat.S_ISDIR(kind) else os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(entry.name, flags | os.O_NONBLOCK, dir_fd=source)
    try:
        if stat.S_ISDIR(kind):
            copy_tree(scope, fd, here, made, entry.name, there)
        else:
            copy_file(fd, os.fstat(fd), made, entry.name, there, here)
    finally:
        os.close(fd)
