"""Deny patterns expanded into paths, within a budget, never through a symlink.

A `glob_pattern` entry (``/w/**/*.env``, ``/w/secrets/*``) names no fixed path, so it is
expanded when a sandbox is set up. What a pattern means is the core's (`execproto._globs`,
which fs calls use too): this walk only finds the existing paths that meaning picks. The
standard library's glob is no use here: it follows symlinks (a sandboxed command's `a -> .`
makes `**` endless, and `/proc/*/root` loops back to `/`), it skips dot files (so `secrets/*`
would not cover `secrets/.key`), and it has no budget. This walk follows no symlink, matches
dot files, skips the kernel's own trees, and gives up past a fixed number of directory
entries: a pattern it cannot expand in full is refused, since a deny that covers part of what
it names would be a lie. One `Budget` is shared by every pattern of a start, so 256 patterns
cost what one may, not 256 times that; it bounds memory as well as time: a directory is counted
entry by entry as it is read (one of a million entries is refused after 50,000, not listed
whole first), the walk holds names, not paths (a listing of 4 KB paths deep in a tree would be
200 MB), and it goes no deeper than `MAX_DEPTH` directories (a tree 2,000 deep would overflow
the interpreter's stack). The caller's ``check`` runs at every directory, for its deadline.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from execproto.policy import ANY_DIRECTORIES, name_matches, parts

# The kernel's own trees: a fresh /proc and /dev in every sandbox, and /sys is no place for
# a workspace's secrets; walking them is slow and, for /proc, endless.
SKIPPED = ("/proc", "/sys", "/dev")
# Directory entries looked at and paths matched, for all the patterns of one start together
# (about 0.3 s of a worker thread at most; each match becomes a mount, of the 1024 rules a
# start may have, `_bwrap.MAX_RULES`); and how deep a walk or a pattern may go.
MAX_VISITS = 50_000
MAX_MATCHES = 1024
MAX_DEPTH = 128


class TooBroad(Exception):
    """The patterns reach more than the budget allows."""


class Budget:
    """What the expansions of one start may still look at and find."""

    def __init__(self, check: Callable[[], None] = lambda: None) -> None:
        self.visits = 0
        self.matches = 0
        self.check = check  # raises when the start's time is up


def expand(pattern: str, budget: Budget | None = None) -> list[str]:
    """The existing paths an absolute ``pattern`` matches (``**``: any number of directories),
    counted against ``budget`` (by default, a fresh one)."""
    found: list[str] = []
    wanted = list(parts(pattern))
    if len(wanted) > MAX_DEPTH:
        raise TooBroad(f"a deny pattern has over {MAX_DEPTH} components")
    _walk("/", wanted, found, budget or Budget())
    return found


def _walk(base: str, wanted: list[str], found: list[str], budget: Budget) -> None:
    if not wanted:
        budget.matches += 1
        if budget.matches > MAX_MATCHES:
            raise TooBroad(f"the deny patterns match over {MAX_MATCHES} paths")
        found.append(base)
        return
    if base.count("/") > MAX_DEPTH:
        raise TooBroad(f"the deny patterns reach over {MAX_DEPTH} directories deep")
    head, rest = wanted[0], wanted[1:]
    if head == ANY_DIRECTORIES:
        _walk(base, rest, found, budget)  # zero directories
        for name in _children(base, budget):
            child = os.path.join(base, name)
            if _is_dir(child):
                _walk(child, wanted, found, budget)  # one more, and perhaps others
        return
    if not any(char in head for char in "*?["):
        child = os.path.join(base, head)
        if os.path.lexists(child) and not _skipped(child) and (not rest or _is_dir(child)):
            _walk(child, rest, found, budget)
        return
    for name in _children(base, budget):
        child = os.path.join(base, name)
        if name_matches(name, head) and (not rest or _is_dir(child)):
            _walk(child, rest, found, budget)


def _children(directory: str, budget: Budget) -> list[str]:
    """The names in ``directory``, each counted as it is read."""
    budget.check()
    if _skipped(directory):
        return []
    names = []
    try:
        with os.scandir(directory) as listing:
            for entry in listing:
                budget.visits += 1
                if budget.visits > MAX_VISITS:
                    raise TooBroad(f"expanding the deny patterns looks at over {MAX_VISITS} "
                                   "directory entries")
                names.append(entry.name)
    except OSError:
        return []  # unreadable or gone: nothing of it can be matched
    return sorted(names)


def _is_dir(path: str) -> bool:
    """A real directory: a symlink to one is not walked into."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _skipped(path: str) -> bool:
    return any(path == top or path.startswith(top + "/") for top in SKIPPED)
