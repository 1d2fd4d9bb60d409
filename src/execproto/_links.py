"""A policy's rules taken to their real paths, trusting no symlink a sandbox could have planted.

The core's rules are lexical; a sandbox is set up at real paths, so each rule's path is
resolved through its symlinks first. A symlink that lies where a sandbox may write is the
sandbox's word, not the operator's: one command replaces `/tmp/t` (its tmpdir, in a writable
`/tmp`) with a link to `/etc`, and the next command's write rule for `/tmp/t` would follow it.
So resolving tells the links apart:

- a link whose directory no sandbox may write (`/lib -> usr/lib`, a workspace reached through
  an operator's link) is followed as `realpath` would;
- a link whose directory lies in a writable place is *planted*. The rule it leads is followed
  only into the writable places, where it may take access away and never add any; elsewhere
  it is dropped, since what lies there keeps its own rule. A planted link under a write rule
  that leads out of the writable places fails the start: the grant cannot be given where the
  client meant it, and giving it where the link points would be the escape.

A cap (the server's secrets, its own files) holds at its name and at its real path.

A rule that holds access back (read-only, denied) through such a planted link is another
matter: its target can be held, but not the link, which the command may replace. The
reference refuses the sandbox then; `crossing` finds the rule, for the adapter to do so too.

The writable places are the operator's writable roots (with a floor every process is
sandboxed, so no other sandbox wrote anywhere else) and the request's own write rules, at
their names and at their real paths. Without a floor a client may run commands unsandboxed,
which can write anything anyway; a sandbox then is kept from what its own kind could plant.

The resolving is pure: the adapter hands in `readlink`, which reads one path's link (None for
anything that is not a link, missing included, as realpath treats a missing tail lexically).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Sequence

from ._policy import PathRule, Policy

# The target of the symlink at a path with no symlink in it, or None where there is none.
Readlink = Callable[[str], "str | None"]
# Each of some caps at its real path, those that lead nowhere (a loop) left out.
FollowCaps = Callable[[Sequence[PathRule]], "list[PathRule]"]
# Links followed for one path before it is given up as a loop (Linux's own bound).
MAX_LINKS = 40


class PlantedLink(Exception):
    """A rule's path leads, through a link a sandbox could have planted, where its grant may
    not go; or it cannot be resolved. The message is the one the stage gives for a path that
    changed under it, with why."""


def _beneath(path: str, tops: Iterable[str]) -> bool:
    return any(top == "/" or path == top or path.startswith(top + "/") for top in tops)


def follow(path: str, readlink: Readlink, writable: Sequence[str] = (),
           hops: list[tuple[str, str]] | None = None) -> tuple[str, str | None]:
    """``path`` resolved through every symlink, and the first link on the way that lies in one
    of the ``writable`` places (None: no link did). Each link followed is added to ``hops``
    as (where it is, its target), in order, those before a loop too."""
    real, planted, links = _walk(path, list(reversed(path.split("/"))), "/", 0, readlink,
                                 writable, hops)
    return real, planted


def _walk(path: str, todo: list[str], real: str, links: int, readlink: Readlink,
          writable: Sequence[str] = (), hops: list[tuple[str, str]] | None = None,
          ) -> tuple[str, str | None, int]:
    """`follow`'s walk from ``real``, with ``links`` followed so far, through the names of
    ``todo`` (last first); also returns how many links it has followed then."""
    planted = None
    while todo:
        name = todo.pop()
        if name in ("", "."):
            continue
        if name == "..":
            real = posixpath.dirname(real)
            continue
        here = ("" if real == "/" else real) + "/" + name  # join, without its generality
        target = readlink(here)
        if target is None:
            real = here
            continue
        links += 1
        if links > MAX_LINKS:
            raise PlantedLink(f"{path}: too many levels of symbolic links")
        if hops is not None:
            hops.append((here, target))
        if planted is None and _beneath(real, writable):
            planted = here
        if target.startswith("/"):
            real = "/"
        todo += reversed(target.split("/"))
    return real, planted, links


def pinned(policy: Policy, readlink: Readlink, floor: Policy | None = None,
           reading: bool = False, follow_caps: FollowCaps | None = None) -> Policy:
    """``policy``'s rules at their real paths, a planted link followed only as far as the
    module's docstring says (raises `PlantedLink` where a write grant would leave). Not
    narrowed by ``floor``: the caller does that, once it knows which paths exist.

    ``reading``: the caller asks the result only what may be read (a program's lookup).
    The caps that hold to read then count only where they change that: where a planted
    link's rule is kept or not by whether its target is writable. Elsewhere they only take
    write away, and following each of the server's own files through its links would be
    most of the cost. What is raised is the same either way.

    ``follow_caps``: the caps at their real paths from a caller that resolves them anyway
    (the adapter's walk of the ways to them), in place of `_followed_caps`' own walk."""
    readlink = _once_each(readlink)
    writable = _writable(policy, readlink, floor)
    followed = []
    for rule in policy.rules:
        try:
            followed.append((rule, *follow(rule.path, readlink, writable)))
        except PlantedLink:
            if rule.access == "write":
                raise
            # A loop: nothing lies there to show or to hide, and a grant cannot go there.
    held = policy.caps
    if reading and not (any(planted is not None for _, _, planted in followed) and any(
            rule.access == "write" for rule, _, planted in followed if planted is None)):
        held = tuple(cap for cap in held if cap.access != "read")
    caps = [*held, *(_followed_caps(held, readlink) if follow_caps is None
                     else follow_caps(held))]
    trusted = Policy.of([PathRule(path=real, access=rule.access)
                         for rule, real, planted in followed if planted is None], policy.network,
                        caps=caps)
    rules = []
    for rule, real, planted in followed:
        if planted is not None and trusted.access(real) != "write":
            if rule.access == "write":
                raise PlantedLink(f"{rule.path} changed while the sandbox was set up: the "
                                  f"symlink {planted} lies where a sandbox may write")
            continue
        rules.append(PathRule(path=real, access=rule.access))
    return Policy.of(rules, policy.network, policy.deny_globs, caps=caps)


def crossing(policy: Policy, readlink: Readlink,
             floor: Policy | None = None) -> tuple[PathRule, str] | None:
    """The first rule that holds access back (read-only or denied) whose path goes through a
    link lying where a sandbox may write, with that link; None where no rule does. Such a
    rule cannot be kept as the client meant it: the mount would hold the link's target, and
    the command could replace the link itself (a `.codex` leading elsewhere becomes a
    directory of its own, with a config the next command and the user's client trust). The
    reference refuses the whole sandbox then, and so does execproto (`refusal`). A loop on
    the way counts as crossing its first such link."""
    readlink = _once_each(readlink)
    writable = _writable(policy, readlink, floor)
    capped = {cap.path for cap in policy.caps}  # held at both ends (`_followed_caps`)
    for rule in policy.rules:
        if rule.access == "write" or rule.path == "/" or rule.path in capped:
            continue
        hops: list[tuple[str, str]] = []
        try:
            follow(rule.path, readlink, writable, hops)
        except PlantedLink:
            pass
        for where, _ in hops:
            if _beneath(posixpath.dirname(where), writable):
                return rule, where
    return None


# How the reference names a rule it cannot keep (`crossing`), by the rule's access.
_HELD = {"read": "read-only", "none": "deny-read"}


def refusal(rule: PathRule, link: str) -> str:
    """The reference's words for a rule `crossing` found."""
    return (f"cannot enforce sandbox {_HELD[rule.access]} path {rule.path} because it crosses "
            f"writable symlink {link}")


def _writable(policy: Policy, readlink: Readlink, floor: Policy | None) -> list[str]:
    """Where a sandbox may write (the module's docstring): the floor's and the request's
    writable roots, the request's at their real paths too."""
    writable = [*(floor.writable_roots() if floor is not None else ()),
                *policy.writable_roots()]
    return writable + [follow(top, readlink)[0] for top in policy.writable_roots()]


def _once_each(readlink: Readlink) -> Readlink:
    """``readlink`` asked once a path for one resolving: the rules share their parents (and
    one snapshot of the links is what the rules are resolved against)."""
    seen: dict[str, str | None] = {}

    def read(path: str) -> str | None:
        if path not in seen:
            seen[path] = readlink(path)
        return seen[path]
    return read


def _followed_caps(caps: Iterable[PathRule], readlink: Readlink) -> list[PathRule]:
    """Each cap at its real path too (it holds both: a cap only takes access away).

    The caps are the server's own files, a hundred paths sharing most of their ancestors:
    each is walked on from the walk of its longest prefix met before (`follow` is a walk
    over the names, so the rest of it is the same), not from `/`."""
    found = []
    # By path: where its walk got to and how many links it followed; None: too many.
    walked: dict[str, tuple[str, int] | None] = {"": ("/", 0)}
    for cap in caps:
        top, rest = cap.path, []
        while top not in walked:
            cut = top.rfind("/")
            rest.append(top[cut + 1:])
            top = top[:max(cut, 0)]
        state = walked[top]
        for name in reversed(rest):
            if state is not None:
                real, links = state
                here = ("" if real == "/" else real) + "/" + name
                if name not in ("", ".", "..") and readlink(here) is None:
                    state = (here, links)  # no link: `_walk`'s step, without the call
                else:
                    try:
                        real, _, links = _walk(cap.path, [name], real, links, readlink)
                        state = (real, links)
                    except PlantedLink:
                        state = None
            top = f"{top}/{name}"
            walked[top] = state
        if state is not None:  # else a loop: nothing lies there to hold, and the name is held
            found.append(PathRule(path=state[0], access=cap.access))
    return found
