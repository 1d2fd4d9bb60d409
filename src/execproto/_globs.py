"""Deny patterns (a profile's ``glob_pattern`` entries): one meaning for processes and fs calls.

A pattern is an absolute path (a relative one is taken from the sandbox's cwd when the policy
is made) whose components are matched one by one, as the reference does:

- ``**`` alone as a component: zero or more directories;
- any other component: a shell pattern within one name (``*``, ``?``, ``[...]``), never
  crossing a ``/``, and dot files are names like any other (``*.env`` matches ``.env``).

A path is denied when it or one of its ancestors matches: a denied directory hides all it holds.
The process sandbox expands patterns into the existing paths they match (`adapters/_glob`,
with `parts` and `name_matches`); fs calls test each real path they touch (`denies`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from functools import lru_cache

ANY_DIRECTORIES = "**"


def parts(pattern: str) -> tuple[str, ...]:
    """A pattern's components (empty ones and ``.`` dropped)."""
    return tuple(part for part in pattern.split("/") if part and part != ".")


def name_matches(name: str, part: str) -> bool:
    """Whether one name matches one component of a pattern (not ``**``)."""
    return fnmatch.fnmatchcase(name, part)


def matches(pattern: str, path: str) -> bool:
    """Whether the absolute ``path`` itself matches ``pattern``."""
    return _match(parts(pattern), parts(path))


def denies(patterns: Iterable[str], path: str) -> bool:
    """Whether ``path`` or one of its ancestors matches one of ``patterns``."""
    names = parts(path)
    for pattern in patterns:
        wanted = parts(pattern)
        if any(_match(wanted, names[:depth]) for depth in range(1, len(names) + 1)):
            return True
    return False


@lru_cache(maxsize=4096)
def _match(wanted: tuple[str, ...], names: tuple[str, ...]) -> bool:
    """Components against components, by a table over (pattern index, name index): a pattern
    with many ``**`` costs its length times the path's, never an exponential search."""
    # reach[j]: the first i pattern components can match the first j names.
    reach = [True] + [False] * len(names)
    for part in wanted:
        if part == ANY_DIRECTORIES:
            # Zero or more names: reachable from any earlier reachable point.
            for j in range(1, len(names) + 1):
                reach[j] = reach[j] or reach[j - 1]
            continue
        reach = [False] + [reach[j - 1] and name_matches(names[j - 1], part)
                           for j in range(1, len(names) + 1)]
    return reach[len(names)]
