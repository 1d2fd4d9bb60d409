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

import posixpath
from collections.abc import Iterable
from typing import Literal

import attrs

from ._records import Record

Access = Literal["none", "read", "write"]
RANK: dict[str, int] = {"none": 0, "read": 1, "write": 2}


def normalize(path: str) -> str:
    """An absolute path without `.`, `..`, repeated or trailing slashes (lexically)."""
    path = posixpath.normpath(path)
    return "/" if path == "//" else path


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
        by_path: dict[str, PathRule] = {}
        capped: dict[str, PathRule] = {}
        for cap in caps:
            cap = _normalized(cap)
            if cap.path not in capped or _weaker(cap, capped[cap.path]):
                capped[cap.path] = cap
        for rule in rules:
            rule = _normalized(rule)
            old = by_path.get(rule.path)
            if old is None or _weaker(rule, old):
                by_path[rule.path] = rule
        by_path.setdefault("/", PathRule(path="/", access="none"))
        if capped:
            index = dict(by_path)
            for path, cap in capped.items():  # the cap's path gets what was there, held to it
                there = deepest(index, path)
                if path not in by_path and RANK[there.access] > RANK[cap.access]:
                    by_path[path] = PathRule(path=path, access=there.access)
            by_path = {path: _held(rule, capped) for path, rule in by_path.items()}
        return cls(rules=_sorted(by_path.values()), network=network, deny_globs=tuple(deny_globs),
                   caps=_sorted(capped.values()))

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
        caps = [PathRule(path=path, access=access) for path in paths]
        if not caps:
            return self
        return Policy.of(self.rules, self.network, self.deny_globs, caps=[*self.caps, *caps])

    def writable_roots(self) -> tuple[str, ...]:
        return tuple(rule.path for rule in self.rules if rule.access == "write")


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
        parent = posixpath.dirname(path)
        if parent == path:
            break
        path = parent
    return rule if access == rule.access else PathRule(path=rule.path, access=access)


def deepest(index: dict[str, PathRule], path: str) -> PathRule:
    """The rule of ``index`` at ``path`` or its nearest ancestor: the cost is the path's
    depth, not the number of rules (``index`` always holds `/`)."""
    while path not in index:
        parent = posixpath.dirname(path)
        if parent == path:  # "" or a relative path: nothing above it but the root rule
            return index["/"]
        path = parent
    return index[path]


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
