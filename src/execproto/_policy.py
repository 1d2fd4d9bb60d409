"""What a sandboxed process or fs call may touch: one policy, decided in the core.

A `Policy` is a list of path rules and a network switch. A path's access is the access of the
deepest rule whose path is that path or one of its ancestors (so `/` read, `/w` write,
`/w/.git` read makes everything readable, `/w` writable but for its `.git`). Access is ordered
none < read < write. No policy at all (``None``) means unrestricted: no sandbox.

Two policies combine by `narrow`: at every path the lesser access, and the network only if both
allow it. The operator's policy (its flags) is a floor in this sense: whatever a client asks is
narrowed by it, so a client can take rights away, never add them. The rules are lexical (absolute,
normalized paths); symlinks are the adapter's to resolve, and it narrows the resolved rules by
the floor again before it enforces them.
"""

from __future__ import annotations

import bisect
import functools
import posixpath
from collections.abc import Iterable
from typing import Literal

import attrs

from ._records import Record

Access = Literal["none", "read", "write"]
RANK: dict[str, int] = {"none": 0, "read": 1, "write": 2}


def normalize(path: str) -> str:
    """An absolute path without `.`, `..`, repeated or trailing slashes (lexically)."""
    if _normal(path):  # most are already (the caps, every rule a policy holds): a few finds
        return path
    path = posixpath.normpath(path)
    return "/" if path == "//" else path


def _normal(path: str) -> bool:
    """Whether `normalize` leaves ``path`` as it is: absolute, with no empty, `.` or `..`
    component and no trailing slash (a subset: normpath is the judge of the rest)."""
    return path == "/" or (path[:1] == "/" and path[-1] != "/" and "//" not in path
                           and "/./" not in path and "/../" not in path
                           and not path.endswith(("/.", "/..")))


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


@attrs.frozen(kw_only=True, repr=False)
class PathRule(Record):
    """Access to ``path`` and everything beneath it, unless a deeper rule says otherwise."""

    path: str
    access: str  # an Access


def _weaker(rule: PathRule, other: PathRule) -> bool:
    return RANK[rule.access] < RANK[other.access]


def _sorted(rules: Iterable[PathRule]) -> tuple[PathRule, ...]:
    return tuple(sorted(rules, key=lambda rule: (_depth(rule.path), rule.path)))


@attrs.frozen(kw_only=True, repr=False)
class Policy(Record):
    """A restricted sandbox. ``rules`` are sorted shallow first and hold one rule per path."""

    rules: tuple[PathRule, ...]
    network: bool
    # Shell patterns (absolute) of paths denied as well: they name no fixed path, so the
    # adapter expands them when it sets the sandbox up, and what they match is denied.
    deny_globs: tuple[str, ...] = ()
    # The most each path and everything beneath it may have, whatever a deeper rule says: the
    # server's secrets (none) and its own files (read). Folded into ``rules`` by `of`, and
    # kept so that rules taken to other paths (a symlink's target) are held to them again.
    caps: tuple[PathRule, ...] = ()

    @classmethod
    def of(
        cls, rules: Iterable[PathRule], network: bool, deny_globs: Iterable[str] = (),
        caps: Iterable[PathRule] = (),
    ) -> Policy:
        """A policy from rules in any order; of two rules for one path the lesser wins, and
        every path not beneath a rule is denied (an explicit `/` none rule is added). Each of
        ``caps`` holds its path and everything beneath it to at most its access."""
        by_path = _by_path(rules)
        caps = tuple(caps)
        if not caps:
            return cls(rules=_sorted(by_path.values()), network=network,
                       deny_globs=tuple(deny_globs))
        held = _caps(tuple([cap.path for cap in caps]), tuple([cap.access for cap in caps]))
        return cls._held_to(by_path, network, deny_globs, held)

    @classmethod
    def _held_to(cls, by_path: dict[str, PathRule], network: bool, deny_globs: Iterable[str],
                 held: _Caps) -> Policy:
        """`of`'s end: the rules ``by_path`` (one a path, `/` among them) held to ``held``."""
        index = dict(by_path)
        for path, cap in held.placed(index):  # the cap's path gets what was there, held to it
            there = deepest(index, path)
            if path not in by_path and RANK[there.access] > RANK[cap.access]:
                by_path[path] = PathRule(path=path, access=there.access)
        by_path = {path: _held(rule, held.by_path) for path, rule in by_path.items()}
        return cls(rules=_sorted(by_path.values()), network=network, deny_globs=tuple(deny_globs),
                   caps=held.rules)

    def rule_for(self, path: str) -> PathRule:
        """The deepest rule that governs ``path`` (a normalized absolute path)."""
        return deepest(self.index(), path)

    def index(self) -> dict[str, PathRule]:
        """The rules by path, for callers that look many paths up (see `deepest`)."""
        return {rule.path: rule for rule in self.rules}

    def access(self, path: str) -> str:
        return self.rule_for(normalize(path)).access

    def can_read(self, path: str) -> bool:
        return self.access(path) != "none"

    def can_write(self, path: str) -> bool:
        return self.access(path) == "write"

    def narrow(self, other: Policy | None) -> Policy:
        """At every path the lesser of the two accesses; network only if both allow it."""
        if other is None:
            return self
        rules = []
        mine_by, theirs_by = self.index(), other.index()
        for path in mine_by.keys() | theirs_by.keys():
            mine, theirs = deepest(mine_by, path), deepest(theirs_by, path)
            access = min(mine.access, theirs.access, key=RANK.__getitem__)
            rules.append(PathRule(path=path, access=access))
        globs = self.deny_globs + tuple(g for g in other.deny_globs if g not in self.deny_globs)
        return Policy.of(rules, self.network and other.network, globs,
                         caps=self.caps + other.caps)

    def hiding(self, paths: Iterable[str]) -> Policy:
        """This policy with each of ``paths`` and everything beneath it denied, whatever a
        deeper rule grants (the server's secrets)."""
        return self.capped(paths, "none")

    def capped(self, paths: Iterable[str], access: str) -> Policy:
        """This policy with each of ``paths`` and everything beneath it held to ``access``."""
        paths = tuple(paths)
        if not paths:
            return self
        # The caps as `of` remembers them, with no rule made for each (the server's own
        # files are a hundred, the same at every start).
        held = _caps((*[cap.path for cap in self.caps], *paths),
                     (*[cap.access for cap in self.caps], *(access,) * len(paths)))
        return Policy._held_to(_by_path(self.rules), self.network, self.deny_globs, held)

    def writable_roots(self) -> tuple[str, ...]:
        return tuple(rule.path for rule in self.rules if rule.access == "write")


def _by_path(rules: Iterable[PathRule]) -> dict[str, PathRule]:
    """The rules by normalized path, the lesser of two for one path, and `/` denied if no
    rule is there."""
    by_path: dict[str, PathRule] = {}
    for rule in rules:
        rule = _normalized(rule)
        old = by_path.get(rule.path)
        if old is None or _weaker(rule, old):
            by_path[rule.path] = rule
    by_path.setdefault("/", PathRule(path="/", access="none"))
    return by_path


def _normalized(rule: PathRule) -> PathRule:
    path = normalize(rule.path)
    return rule if path == rule.path else PathRule(path=path, access=rule.access)


def _held(rule: PathRule, caps: dict[str, PathRule]) -> PathRule:
    """``rule`` held to every cap at or above its path: looked up at each ancestor, so the
    cost is the path's depth, not the number of caps (the server's own files are a few
    hundred)."""
    access, path = rule.access, rule.path
    while True:
        cap = caps.get(path)
        if cap is not None and RANK[cap.access] < RANK[access]:
            access = cap.access
        cut = path.rfind("/")
        if cut > 0 and path[cut - 1] != "/":  # the parent, as dirname gives it
            path = path[:cut]
        elif cut == 0 and path != "/":
            path = "/"
        else:  # the root, a relative path's top, or `//`'s own (normpath keeps `//a`)
            parent = posixpath.dirname(path)
            if parent == path:
                break
            path = parent
    return rule if access == rule.access else PathRule(path=rule.path, access=access)


def deepest(index: dict[str, PathRule], path: str) -> PathRule:
    """The rule of ``index`` at ``path`` or its nearest ancestor: the cost is the path's
    depth, not the number of rules (``index`` always holds `/`). The ancestors are cut at
    each slash, as `posixpath.dirname` would give them but for names no rule has (a
    trailing or doubled slash: ``index`` holds normalized paths)."""
    while path not in index:
        cut = path.rfind("/")
        if cut <= 0:  # `/` itself, or a relative path: nothing above it but the root rule
            return index["/"]
        path = path[:cut]
    return index[path]


class _Caps:
    """A policy's caps as `Policy.of` uses them, made once for each list of caps (they are
    the server's own files, the same at every start): normalized, the lesser access kept
    for a path, sorted as a policy holds them. Never changed once made (it is shared)."""

    __slots__ = ("by_path", "rules", "paths", "under_root")

    def __init__(self, by_path: dict[str, PathRule]) -> None:
        self.by_path = by_path
        self.rules = _sorted(by_path.values())
        # The paths sorted as plain strings, where those beneath one path lie together.
        self.paths = tuple(sorted(by_path))
        # By a root rule's access, the caps that would give a rule beneath it: those that
        # hold less.
        self.under_root = {access: tuple(cap for cap in by_path.values()
                                         if RANK[cap.access] < RANK[access]) for access in RANK}

    def placed(self, index: dict[str, PathRule]) -> Iterable[tuple[str, PathRule]]:
        """The caps whose path may get a rule of its own among ``index``'s: each beneath a
        rule other than the root's, and those holding less than the root's access (the
        rest lie beneath the root rule alone, which they would not change). Each once."""
        found: dict[str, PathRule] = {}
        for top in index:
            if top == "/":
                continue
            cap = self.by_path.get(top)
            if cap is not None:
                found[top] = cap
            low = bisect.bisect_left(self.paths, top + "/")
            high = bisect.bisect_left(self.paths, top + "0", low)  # "0" follows "/"
            for path in self.paths[low:high]:
                found[path] = self.by_path[path]
        for cap in self.under_root[index["/"].access]:
            found.setdefault(cap.path, cap)
        return found.items()


# How many lists of caps `_caps` remembers: a server has a few (its own files, and those
# with each symlink followed); a request only adds a cap in rare cases (the proxy's CA).
_CAPS_KEPT = 32


@functools.lru_cache(maxsize=_CAPS_KEPT)
def _caps(paths: tuple[str, ...], accesses: tuple[str, ...]) -> _Caps:
    """The caps ``PathRule(path, access)`` for these, as `_Caps` holds them: a pure function
    of its arguments, remembered for the next start."""
    by_path: dict[str, PathRule] = {}
    for path, access in zip(paths, accesses, strict=True):
        cap = _normalized(PathRule(path=path, access=access))
        if cap.path not in by_path or _weaker(cap, by_path[cap.path]):
            by_path[cap.path] = cap
    return _Caps(by_path)


# The host kernel's knobs, read-only in every sandbox whatever a profile grants (as the
# sandbox's own /proc keeps /proc/sys): one granted `/` could otherwise retune the host, or
# write its pid into the root cgroup's cgroup.procs and leave its cgroup.
KERNEL_KNOBS = ("/sys",)


def narrow(floor: Policy | None, request: Policy | None, secrets: Iterable[str] = (),
           protected: Iterable[str] = ()) -> Policy | None:
    """The policy that applies when the operator's ``floor`` meets a client's ``request``
    (``None`` on either side: that side restricts nothing), with the server's ``secrets``
    denied in it and its ``protected`` files (what it runs) and the kernel's knobs
    read-only, each with everything beneath it."""
    effective = request if floor is None else floor.narrow(request)
    if effective is None:
        return None
    return effective.hiding(secrets).capped((*protected, *KERNEL_KNOBS), "read")
