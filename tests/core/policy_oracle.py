"""The policy's decisions computed the plain way, as `_policy` and `_links` did before they
were made cheap (issue 35): every cap normalized, placed and sorted at each call, every
ancestor found with `posixpath.dirname`. `test_policy_fast` holds the real ones to it."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from execproto._links import PlantedLink, Readlink, _once_each, follow
from execproto._policy import KERNEL_KNOBS, RANK, PathRule, Policy


def normalize(path: str) -> str:
    path = posixpath.normpath(path)
    return "/" if path == "//" else path


def deepest(index: dict[str, PathRule], path: str) -> PathRule:
    while path not in index:
        parent = posixpath.dirname(path)
        if parent == path:
            return index["/"]
        path = parent
    return index[path]


def _sorted(rules: Iterable[PathRule]) -> tuple[PathRule, ...]:
    return tuple(sorted(rules, key=lambda rule: (
        0 if rule.path == "/" else rule.path.count("/"), rule.path)))


def _normalized(rule: PathRule) -> PathRule:
    path = normalize(rule.path)
    return rule if path == rule.path else PathRule(path=path, access=rule.access)


def _weaker(rule: PathRule, other: PathRule) -> bool:
    return RANK[rule.access] < RANK[other.access]


def _held(rule: PathRule, caps: dict[str, PathRule]) -> PathRule:
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


def of(rules: Iterable[PathRule], network: bool, deny_globs: Iterable[str] = (),
       caps: Iterable[PathRule] = ()) -> Policy:
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
        for path, cap in capped.items():
            there = deepest(index, path)
            if path not in by_path and RANK[there.access] > RANK[cap.access]:
                by_path[path] = PathRule(path=path, access=there.access)
        by_path = {path: _held(rule, capped) for path, rule in by_path.items()}
    return Policy(rules=_sorted(by_path.values()), network=network,
                  deny_globs=tuple(deny_globs), caps=_sorted(capped.values()))


def index(policy: Policy) -> dict[str, PathRule]:
    return {rule.path: rule for rule in policy.rules}


def access(policy: Policy, path: str) -> str:
    return deepest(index(policy), normalize(path)).access


def narrow_policies(mine: Policy, other: Policy | None) -> Policy:
    if other is None:
        return mine
    rules = []
    mine_by, theirs_by = index(mine), index(other)
    for path in mine_by.keys() | theirs_by.keys():
        a, b = deepest(mine_by, path), deepest(theirs_by, path)
        rules.append(PathRule(path=path, access=min(a.access, b.access, key=RANK.__getitem__)))
    globs = mine.deny_globs + tuple(g for g in other.deny_globs if g not in mine.deny_globs)
    return of(rules, mine.network and other.network, globs, caps=mine.caps + other.caps)


def capped(policy: Policy, paths: Iterable[str], access: str) -> Policy:
    caps = [PathRule(path=path, access=access) for path in paths]
    if not caps:
        return policy
    return of(policy.rules, policy.network, policy.deny_globs, caps=[*policy.caps, *caps])


def narrow(floor: Policy | None, request: Policy | None, secrets: Iterable[str] = (),
           protected: Iterable[str] = ()) -> Policy | None:
    effective = request if floor is None else narrow_policies(floor, request)
    if effective is None:
        return None
    return capped(capped(effective, secrets, "none"), (*protected, *KERNEL_KNOBS), "read")


def writable_roots(policy: Policy) -> list[str]:
    return [rule.path for rule in policy.rules if rule.access == "write"]


def pinned(policy: Policy, readlink: Readlink, floor: Policy | None = None) -> Policy:
    readlink = _once_each(readlink)
    writable = [*(writable_roots(floor) if floor is not None else ()), *writable_roots(policy)]
    writable += [follow(top, readlink)[0] for top in writable_roots(policy)]
    followed = []
    for rule in policy.rules:
        try:
            followed.append((rule, *follow(rule.path, readlink, writable)))
        except PlantedLink:
            if rule.access == "write":
                raise
    found = []
    for cap in policy.caps:
        try:
            found.append(PathRule(path=follow(cap.path, readlink)[0], access=cap.access))
        except PlantedLink:
            pass
    caps = [*policy.caps, *found]
    trusted = of([PathRule(path=real, access=rule.access)
                  for rule, real, planted in followed if planted is None], policy.network,
                 caps=caps)
    rules = []
    for rule, real, planted in followed:
        if planted is not None and access(trusted, real) != "write":
            if rule.access == "write":
                raise PlantedLink(f"{rule.path} changed while the sandbox was set up: the "
                                  f"symlink {planted} lies where a sandbox may write")
            continue
        rules.append(PathRule(path=real, access=rule.access))
    return of(rules, policy.network, policy.deny_globs, caps=caps)

