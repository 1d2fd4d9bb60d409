"""``fs/walk``: a breadth-first listing under a root, within budgets, as the reference walks.

What it does, each point measured against the reference (docs/protocol.md has the list): the root
itself is not listed; each directory's names are sorted bytewise and its subdirectories queued
in that order; only files and directories are listed, yet every child that could be stat'ed
(following links) spends one of ``maxEntries``, and one whose stat failed is an error that
spends one too, while a broken link spends nothing; every directory read, failed or not, spends
one of ``maxDirectories``; a directory is read at most once, by device and inode, the first path
in breadth-first order winning. Names go out as URIs of their real bytes, unlike the reference,
which loses what is not UTF-8.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Callable
from typing import Any

from execproto import uri_from_path

from ._posix import os_error_text


class _Budget(Exception):
    """A budget ran out while something was left: the walk stops, truncated."""


def walk(
    root: str, p: dict[str, Any], allowed: Callable[[str], bool] = lambda path: True
) -> dict[str, Any]:
    """Walk ``root`` (normalized, absolute). ``allowed`` says whether a path, as reached, may be
    looked at: what a sandbox or ``--fs-root`` denies is not listed, descended or reported.
    OSError about the root itself propagates; everything below becomes an entry of ``errors``."""
    entries: list[dict[str, str]] = []
    errors: list[dict[str, str]] = []
    empty = {"entries": entries, "errors": errors, "truncated": False}
    info = os.stat(root)  # a missing root, or one behind a file, is the call's error
    if not stat.S_ISDIR(info.st_mode) or (os.path.islink(root) and not p["follow"]):
        return empty
    seen = {(info.st_dev, info.st_ino)}
    queue: deque[tuple[str, int]] = deque([(root, 0)])
    read = 0
    spent = 0
    try:
        while queue:
            if read == p["maxDirectories"]:
                raise _Budget
            read += 1
            directory, depth = queue.popleft()
            try:
                with os.scandir(os.fsencode(directory)) as listing:
                    children = sorted(listing, key=lambda entry: entry.name)
            except OSError as exc:
                errors.append({"path": uri_from_path(directory), "message": os_error_text(exc)})
                continue
            for child in children:
                path = os.path.join(directory, os.fsdecode(child.name))
                if not allowed(path):
                    continue  # invisible: not listed, not an error, nothing spent
                try:
                    info = child.stat()  # follows a link: its target decides the kind
                except FileNotFoundError:
                    continue  # a broken link: nothing to list, nothing spent
                except OSError as exc:
                    if spent == p["maxEntries"]:
                        raise _Budget from None
                    spent += 1
                    errors.append({"path": uri_from_path(path), "message": os_error_text(exc)})
                    continue
                if spent == p["maxEntries"]:
                    raise _Budget
                spent += 1
                link = child.is_symlink()
                if stat.S_ISREG(info.st_mode) and not link:
                    entries.append({"path": uri_from_path(path), "kind": "file"})
                elif stat.S_ISDIR(info.st_mode) and (p["follow"] or not link):
                    entries.append({"path": uri_from_path(path), "kind": "directory"})
                    key = (info.st_dev, info.st_ino)
                    hidden = p["pruneHidden"] and child.name.startswith(b".")
                    if depth + 1 <= p["maxDepth"] and not hidden and key not in seen:
                        seen.add(key)
                        queue.append((path, depth + 1))
    except _Budget:
        empty["truncated"] = True
    return empty
