"""Capability discovery: Codex skills (``SKILL.md`` files) found on the executor.

``capabilityRoots/discoverV1`` scans each root as the reference does, each under the sandbox
sent with it (measured side by side: tests/adapters/test_discovery_sandbox.py): breadth-first,
each directory's names in bytewise order, directory symlinks followed, a directory scanned once
(the first path that reaches it wins), at most `MAX_DEPTH` directories down; a SKILL.md that is
a regular file, not a link, is taken, and the skills are listed in bytewise order of their
paths. What the sandbox does not show is skipped without a word, as a sandboxed process finds
nothing there; what it denies is found, and its scan or read fails with a warning. Whatever
cannot be read is a warning, not the call's error. ``capabilities/discoverV2`` lists the skills
of $CODEX_HOME/skills/<name>/SKILL.md with the name and description of their front matter,
read through the request's sandbox. Plugins and namespace manifests are not looked for
(docs/protocol.md says what is left out); only a plugin manifest the root's sandbox denies is
named, as the reference's warnings do.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from execproto import Policy, RpcError, uri_from_path
from execproto.fs import DiscoverRoots, SkillRoot

from .._system import os_error_text
from ._beneath import Scope, real
from ._caps import capless
from ._envconfig import codex_home
from ._opening import NotAFile, open_checked

SKILL_FILE = "SKILL.md"
# Directories below a root that are scanned, as the reference's (measured: a SKILL.md six
# directories down is found, seven down is not).
MAX_DEPTH = 6
MAX_DIRECTORIES = 10_000  # scanned per root: a bound on the work one root costs
MAX_SKILL_BYTES = 1 << 20
# The plugin manifests the reference looks for at a root (execproto reads no plugin).
PLUGIN_MANIFESTS = (".codex-plugin/plugin.json", ".claude-plugin/plugin.json",
                    ".cursor-plugin/plugin.json")

_ANYWHERE = Scope()  # no roots, no policy
_DENIED = OSError(errno.EACCES, os.strerror(errno.EACCES))
_LISTED = os.O_RDONLY | os.O_DIRECTORY


def _read(path: str, scope: Scope = _ANYWHERE) -> bytes:
    try:
        fd, _ = open_checked(scope, path, os.O_RDONLY, "read")
    except NotAFile:
        raise OSError(0, "not a file") from None
    with open(fd, "rb") as file:
        return file.read(MAX_SKILL_BYTES)


def _utf8_error(exc: UnicodeDecodeError) -> str:
    """A UTF-8 error in the words of Rust's `Utf8Error`, which the reference's warning quotes."""
    if exc.reason == "unexpected end of data":
        return f"incomplete utf-8 byte sequence from index {exc.start}"
    return f"invalid utf-8 sequence of {exc.end - exc.start} bytes from index {exc.start}"


def _inspect(scope: Scope, path: str) -> tuple[str, os.stat_result]:
    """The real path ``path`` leads to and what a sandboxed process finds there (following
    links): OSError as its stat would fail (ENOENT where nothing is shown, or outside
    ``--fs-root``; EACCES beneath a mask, whose search is refused)."""
    try:
        where = real(path)
    except FileNotFoundError:  # a directory on the way is missing
        where = ""
    seen = scope.seen_as(where) if where else "absent"
    if seen == "absent" and _behind_mask(scope, path):
        raise _DENIED  # a mask on the way refuses the search before anything is missing
    if seen == "absent" or not scope.allows(where, "none"):
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if seen == "masked" and not _masks(scope, where):
        raise _DENIED
    return where, os.stat(where)


def _behind_mask(scope: Scope, path: str) -> bool:
    """Whether the deepest directory on the way to the missing ``path`` that is there is a
    mask, or lies beneath one."""
    here = os.path.dirname(os.path.normpath(path))
    while here != "/":
        try:
            where = real(here)
        except FileNotFoundError:
            here = os.path.dirname(here)
            continue
        if os.path.lexists(where):
            return scope.seen_as(where) == "masked"
        here = os.path.dirname(here)
    return False


def _masks(scope: Scope, where: str) -> bool:
    """Whether ``where`` is a mask itself, not a path beneath one."""
    assert scope.policy is not None
    return scope.policy.rule_for(where).path == where or scope.granted(
        os.path.dirname(where)) != "none"


def _listing(scope: Scope, where: str) -> list[str]:
    """The names in the directory at the real ``where``, as a sandboxed process lists it."""
    seen = scope.seen_as(where)
    if seen == "absent":
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
    if seen == "masked":
        raise _DENIED
    if seen == "leading":
        return scope.leading_to(where)
    try:
        fd, _ = scope.open(where, _LISTED, "read")
    except RpcError:
        raise _DENIED from None
    try:
        return sorted(os.listdir(fd), key=os.fsencode)
    finally:
        os.close(fd)


def _scan(scope: Scope, root: str, where: str, answer: dict[str, Any]) -> None:
    """The skills beneath the directory ``root`` (at the real ``where``) into ``answer``."""
    warnings, found = answer["warnings"], []
    queue = deque([(root, where, 0)])
    scanned = {where}
    while queue and len(scanned) <= MAX_DIRECTORIES:
        scope.spent()
        shown, here, depth = queue.popleft()
        try:
            names = _listing(scope, here)
        except FileNotFoundError:
            continue
        except OSError as exc:
            warnings.append(f"failed to scan capability path {uri_from_path(shown)}: "
                            f"{os_error_text(exc)}")
            continue
        for name in names:
            path, inside = os.path.join(shown, name), os.path.join(here, name)
            try:
                linked = stat.S_ISLNK(os.lstat(inside).st_mode)
                target, info = _inspect(scope, inside)
            except OSError:
                continue  # nothing a scan can use: gone, a dangling link, refused
            if name == SKILL_FILE and stat.S_ISREG(info.st_mode) and not linked:
                found.append(_skill(scope, path, warnings))
            elif stat.S_ISDIR(info.st_mode) and depth < MAX_DEPTH and target not in scanned:
                scanned.add(target)
                queue.append((path, target, depth + 1))
    skills = [skill for skill in found if skill is not None]
    answer["skills"] = sorted(skills, key=lambda skill: os.fsencode(skill["path"]))


def _skill(scope: Scope, path: str, warnings: list[str]) -> dict[str, Any] | None:
    try:
        data = _read(path, scope)
    except (OSError, RpcError) as exc:
        why = os_error_text(exc) if isinstance(exc, OSError) else exc.message
        warnings.append(f"failed to read capability file {uri_from_path(path)}: {why}")
        return None
    try:
        contents = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        warnings.append(f"capability file {uri_from_path(path)} is not UTF-8: "
                        f"{_utf8_error(exc)}")
        return None
    return {"path": path, "instructions": {"path": uri_from_path(path), "contents": contents},
            "metadata": None}


def _manifests(scope: Scope, root: str, warnings: list[str]) -> None:
    """A plugin manifest the sandbox refuses to show is named, as the reference's warnings
    name it; one that is missing is not (and one that is there is not read: no plugins)."""
    for name in PLUGIN_MANIFESTS:
        path = os.path.join(root, name)
        try:
            _inspect(scope, path)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                warnings.append(f"failed to inspect capability file {uri_from_path(path)}: "
                                f"{os_error_text(exc)}")


def _root_in(scope: Scope, root: SkillRoot) -> dict[str, Any]:
    path = root.path
    answer: dict[str, Any] = {"id": root.id, "path": uri_from_path(path), "plugin": None,
                              "skills": [], "namespaceManifests": [], "warnings": [],
                              "error": None}
    try:
        scope.check(path, real(path), "none")  # RpcError: outside --fs-root, the call's error
        where, info = _inspect(scope, path)
    except OSError as exc:
        answer["error"] = (f"failed to inspect capability root {answer['path']}: "
                           f"{os_error_text(exc)}")
        return answer
    if not stat.S_ISDIR(info.st_mode):
        answer["error"] = f"capability root {answer['path']} is not a directory"
        return answer
    _scan(scope, path, where, answer)
    for skill in answer["skills"]:
        del skill["path"]
    _manifests(scope, path, answer["warnings"])
    return answer


def discover_roots(request: DiscoverRoots, scope_for: Callable[[Policy | None], Scope]
                   ) -> dict[str, Any]:
    """Each root scanned under its own sandbox (``scope_for`` makes its scope: the root's
    policy, the server's floor already in it), without capabilities as a sandboxed process."""
    out = []
    for root in request.roots:
        scope = scope_for(root.sandbox).budgeted()
        with capless() if scope.policy is not None else nullcontext():
            out.append(_root_in(scope, root))
    return {"roots": out}


def front_matter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the leading ``---`` fences (flat YAML only)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    fields = {}
    for line in lines[1:]:
        if line.strip() == "---":
            break
        name, colon, rest = line.partition(":")
        if colon and not line.startswith((" ", "\t")):
            fields[name.strip()] = rest.strip().strip("\"'")
    return fields


def discover_home(scope: Scope) -> dict[str, Any]:
    """The skills in $CODEX_HOME/skills, looked for through ``scope`` (the request's sandbox)
    as a sandboxed process would list and read them."""
    base = os.path.join(codex_home(), "skills")
    skills = []
    try:
        names = _listing(scope, real(base))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(base, name, SKILL_FILE)
        try:
            fields = front_matter(_read(path, scope).decode("utf-8", "replace"))
        except (OSError, RpcError):
            continue
        if not fields.get("name") or not fields.get("description"):
            continue  # not a usable skill: Codex needs both
        skills.append({"name": fields["name"], "description": fields["description"],
                       "shortDescription": None, "path": uri_from_path(path),
                       "discoveryRoot": {"id": "codex-home-skills", "path": uri_from_path(base)},
                       "dependencies": None, "policy": None})
    return {"plugins": [], "skills": skills, "warnings": []}
