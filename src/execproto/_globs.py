"""Deny patterns (a profile's ``glob_pattern`` entries): one meaning for processes and fs calls.

A pattern is an absolute path (a relative one is taken from the sandbox's cwd when the policy
is made) whose components are matched one by one, as the reference does:

- ``**`` alone as a component: zero or more directories;
- any other component: a shell pattern within one name (``*``, ``?``, ``[...]``), never
  crossing a ``/``, and dot files are names like any other (``*.env`` matches ``.env``).

A path is denied when it or one of its ancestors matches: a denied directory hides all it holds.
The process sandbox expands patterns into the existing paths they match (`adapters/_glob`,
with `parts` and `name_matches`); fs calls test each real path they touch (`Globs`: the
patterns compiled once per call, `denies` for one path).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
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
    return Globs(patterns).denies(path)


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


# -- the patterns compiled, for the many paths of one call -------------------------------------
#
# Matching each path against each pattern from scratch cost a walk of 20,000 entries under 250
# patterns a minute or more: every ancestor of every path went through every pattern's table.
# Here all the patterns run together as one automaton over a path's names: a state is the set of
# (pattern, component) positions reached so far, stepped by one name at a time, and a path's
# state is its parent's stepped once, the parent's remembered (a walk's children share it). A
# step costs a dict lookup for the literal components and one regex (all the shell patterns
# among the components in play, alternated) that almost every name fails at once; only a name
# it matches is tested pattern by pattern. Like the table, this is never an exponential search:
# a state holds at most one entry per component of every pattern.

Position = tuple[int, int]  # (which pattern, how many of its components matched)
_REMEMBERED = 8192  # directories' states (and distinct states) kept; past it, forgotten at once


class _State:
    """Positions reached after some names, and (once asked) how one more name moves them."""

    __slots__ = ("positions", "stay", "literals", "shells", "screen")

    def __init__(self, positions: frozenset[Position]) -> None:
        self.positions = positions
        self.stay: _State | None = None  # where a name that matches no component leads
        self.literals: dict[str, list[Position]] = {}
        self.shells: list[tuple[Callable[[str], object], list[Position]]] = []
        self.screen: Callable[[str], object] | None = None


class Globs:
    """``patterns`` compiled once: `denies` says what the module's `denies` says, for many paths.
    One thread at a time (a call runs on one; a watch's checks on one at a time)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        self._parts = [_one_double_star(parts(pattern)) for pattern in self.patterns]
        self._closures: dict[Position, frozenset[Position]] = {}
        self._states: dict[frozenset[Position], _State] = {}
        self._start = _State(frozenset().union(*(self._closure((index, 0))
                                                 for index in range(len(self._parts)))))
        self._denied = _State(frozenset())  # absorbing: what a denied directory holds is denied
        self._at: dict[tuple[str, ...], _State] = {(): self._start}

    def denies(self, path: str) -> bool:
        """Whether ``path`` or one of its ancestors matches one of the patterns."""
        names = parts(path)
        return bool(names) and self._state(names) is self._denied

    def _state(self, names: tuple[str, ...]) -> _State:
        at = self._at
        known = len(names) - 1  # the deepest ancestor remembered ("/" always is)
        while (found := at.get(names[:known])) is None:
            known -= 1
        state = found
        if len(at) > _REMEMBERED:
            self._at = {(): self._start}
        for depth in range(known, len(names)):
            state = self._step(state, names[depth])
            if depth + 1 < len(names):  # a directory: its other children will ask for it
                self._at[names[:depth + 1]] = state
        return state

    def _step(self, state: _State, name: str) -> _State:
        if state is self._denied or not state.positions:
            return state
        if state.stay is None:
            self._moves(state)
        assert state.stay is not None
        reached = list(state.literals.get(name, ()))
        if state.screen is not None and state.screen(name):
            for match, positions in state.shells:
                if match(name):
                    reached += positions
        if not reached or state.stay is self._denied:  # a ``**`` there ends a pattern
            return state.stay
        return self._intern(state.stay.positions.union(*map(self._closure, reached)))

    def _moves(self, state: _State) -> None:
        """How a name moves ``state``: worked out once per state, on its first step."""
        stay: list[Position] = []
        shells: dict[str, list[Position]] = {}
        for index, done in state.positions:
            wanted = self._parts[index]
            if done == len(wanted):
                continue
            part = wanted[done]
            if part == ANY_DIRECTORIES:
                stay.append((index, done))  # any name: still inside the ``**``
            elif not _MAGIC.search(part):
                state.literals.setdefault(part, []).append((index, done + 1))
            else:
                shells.setdefault(part, []).append((index, done + 1))
        state.shells = [(_shell(part), positions) for part, positions in shells.items()]
        if shells:
            state.screen = _shell_any(tuple(shells))
        state.stay = self._intern(frozenset().union(*map(self._closure, stay)))

    def _intern(self, positions: frozenset[Position]) -> _State:
        if any(done == len(self._parts[index]) for index, done in positions):
            return self._denied
        found = self._states.get(positions)
        if found is None:
            if len(self._states) > _REMEMBERED:
                self._states.clear()
            found = self._states[positions] = _State(positions)
        return found

    def _closure(self, position: Position) -> frozenset[Position]:
        """``position`` and those a ``**`` there reaches by matching no name at all."""
        found = self._closures.get(position)
        if found is None:
            index, done = position
            wanted = self._parts[index]
            end = done
            while end < len(wanted) and wanted[end] == ANY_DIRECTORIES:
                end += 1
            found = self._closures[position] = frozenset((index, at) for at in range(done, end + 1))
        return found


def _one_double_star(wanted: tuple[str, ...]) -> tuple[str, ...]:
    """``**/**`` means ``**``: a run of them is one position, not a run to close over."""
    return tuple(part for at, part in enumerate(wanted)
                 if part != ANY_DIRECTORIES or at == 0 or wanted[at - 1] != ANY_DIRECTORIES)


_MAGIC = re.compile(r"[*?\[]")


def _shell(part: str) -> Callable[[str], object]:
    """One component's shell pattern, as `name_matches` (fnmatch) reads it."""
    return re.compile(fnmatch.translate(part)).match


@lru_cache(maxsize=256)
def _shell_any(shell_parts: tuple[str, ...]) -> Callable[[str], object]:
    """Whether a name matches any of ``shell_parts``: one regex, alternatives in C."""
    return re.compile("|".join(fnmatch.translate(part) for part in shell_parts)).match
