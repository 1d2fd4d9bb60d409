"""``fs/walk``: a breadth-first listing under a root, within budgets, as the reference walks.

What it does, each point measured against the reference (docs/protocol.md has the list): the root
itself is not listed; each directory's names are sorted bytewise and its subdirectories queued
in that order; only files and directories are listed, yet every child that could be stat'ed
(following links) spends one of ``maxEntries``, and one whose stat failed is an error that
spends one too, while a broken link spends nothing; every directory read, failed or not, spends
one of ``maxDirectories``; a directory is read at most once, by device and inode, the first path
in breadth-first order winning. Names go out as URIs of their real bytes, unlike the reference,
which loses what is not UTF-8.

The answer is written as JSON text as the walk goes (`Encoded`): 50,000 entries as dicts were
300,000 small objects alive at once per walk, and the allocator kept their memory after they
were freed (a few walks left the server 60 to 120 MB larger for good).
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections import deque
from collections.abc import Callable

from execproto import Encoded, RpcError, uri_from_path
from execproto.fs import Walk

from .._system import os_error_text
from ._beneath import Scope

_LISTED = os.O_RDONLY | os.O_DIRECTORY
_json = json.JSONEncoder(separators=(",", ":")).encode  # ASCII, as the core writes its own


class _Budget(Exception):
    """A budget ran out while something was left: the walk stops, truncated."""


def _child(scope: Scope, fd: int, real: str, entry: os.DirEntry[str]) -> tuple[os.stat_result, str]:
    """The child's stat (through a symlink, to its target) and real path. A symlink is resolved
    through the scope, so one leading where the call may not look raises `RpcError`."""
    if not entry.is_symlink():
        return entry.stat(follow_symlinks=False), os.path.join(real, entry.name)
    target, where = scope.open(os.path.join(real, entry.name), os.O_PATH, "read")
    try:
        return os.fstat(target), where
    finally:
        os.close(target)


class Abandoned(Exception):
    """The walk's caller is gone (its connection closed): it stops between two directories."""


def walk(request: Walk, scope: Scope, wanted: Callable[[], bool] = lambda: True) -> Encoded:
    """Walk ``request.path`` within ``scope``: what it denies is not listed, descended or reported.
    Each directory is opened through the scope at its real path, and its children looked at by
    descriptor. OSError about the root itself propagates; everything below becomes an entry of
    ``errors``. ``wanted`` is asked before each directory; once it says no, `Abandoned`. A walk
    past the scope's budgets raises `Exhausted` (`Scope.spent`), whatever it found so far."""
    entries = io.StringIO()  # the entries, each written as it is found
    errors: list[dict[str, str]] = []

    def entry(path: str, kind: str) -> None:
        if entries.tell():
            entries.write(",")
        entries.write(f'{{"path":{_json(uri_from_path(path))},"kind":"{kind}"}}')

    def answer(truncated: bool = False) -> Encoded:
        return Encoded(f'{{"entries":[{entries.getvalue()}],"errors":{_json(errors)},'
                       f'"truncated":{_json(truncated)}}}')

    root = request.path
    fd, real = scope.open(root, os.O_PATH, "read")  # a missing root is the call's error
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISDIR(info.st_mode):
        return answer()
    if not request.follow and os.path.islink(root):
        return answer()
    root = os.path.normpath(root)
    seen = {(info.st_dev, info.st_ino)}
    queue: deque[tuple[str, str, int]] = deque([(root, real, 0)])  # (as shown, real, depth)
    read = 0
    spent = 0
    try:
        while queue:
            if read == request.max_directories:
                raise _Budget
            if not wanted():
                raise Abandoned
            read += 1
            directory, real, depth = queue.popleft()
            try:
                fd, _ = scope.open(real, _LISTED, "read")
            except (OSError, RpcError) as exc:
                message = os_error_text(exc) if isinstance(exc, OSError) else exc.message
                errors.append({"path": uri_from_path(directory), "message": message})
                continue
            try:
                with os.scandir(fd) as listing:
                    children = sorted(listing, key=lambda entry: os.fsencode(entry.name))
                for child in children:
                    scope.spent()
                    path = os.path.join(directory, child.name)
                    if not child.is_symlink() and not scope.allows(
                            os.path.join(real, child.name), "read"):
                        continue  # invisible: not listed, not an error, nothing spent
                    try:
                        info, where = _child(scope, fd, real, child)
                    except RpcError:
                        continue  # a symlink leading where the call may not look: invisible
                    except FileNotFoundError:
                        continue  # a broken link: nothing to list, nothing spent
                    except OSError as exc:
                        if spent == request.max_entries:
                            raise _Budget from None
                        spent += 1
                        errors.append({"path": uri_from_path(path), "message": os_error_text(exc)})
                        continue
                    if spent == request.max_entries:
                        raise _Budget
                    spent += 1
                    link = child.is_symlink()
                    if stat.S_ISREG(info.st_mode) and not link:
                        entry(path, "file")
                    elif stat.S_ISDIR(info.st_mode) and (request.follow or not link):
                        entry(path, "directory")
                        key = (info.st_dev, info.st_ino)
                        hidden = request.prune_hidden and child.name.startswith(".")
                        if depth + 1 <= request.max_depth and not hidden and key not in seen:
                            seen.add(key)
                            queue.append((path, where, depth + 1))
            finally:
                os.close(fd)
    except _Budget:
        return answer(truncated=True)
    return answer()
