"""Capability discovery: Codex skills (``SKILL.md`` files) found on the executor.

``capabilityRoots/discoverV1`` returns, per root, every SKILL.md beneath it with its contents,
in bytewise order of the path under the root, as the reference does. ``capabilities/discoverV2``
lists the skills of $CODEX_HOME/skills/<name>/SKILL.md with the name and description of their
front matter. Plugins and namespace manifests are not looked for (docs/protocol.md says what is
left out).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from execproto import RpcError, uri_from_path

from .._processes._posix import os_error_text
from ._beneath import Scope
from ._envconfig import codex_home
from ._opening import NotAFile, open_checked

SKILL_FILE = "SKILL.md"
MAX_DEPTH = 8  # how deep below a root a SKILL.md is looked for: a bound on the work per root
MAX_SKILL_BYTES = 1 << 20


_ANYWHERE = Scope()  # no roots, no policy


def _read(path: str, scope: Scope = _ANYWHERE) -> str:
    try:
        fd, _ = open_checked(scope, path, os.O_RDONLY, "read")
    except NotAFile:
        raise OSError(0, "not a file") from None
    with open(fd, "rb") as file:
        return file.read(MAX_SKILL_BYTES).decode("utf-8", "replace")


def _found(scope: Scope, root: str, depth: int = 0) -> Iterator[str]:
    """Every SKILL.md under ``root``, as paths relative to it, unsorted; directories opened
    through ``scope``, so a symlink never leads the search out of it."""
    try:
        fd, real = scope.open(root, os.O_RDONLY | os.O_DIRECTORY, "read")
    except (OSError, RpcError):
        return
    try:
        with os.scandir(fd) as listing:
            found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
    finally:
        os.close(fd)
    for name, is_dir in found:
        if name == SKILL_FILE:
            yield name
        elif depth < MAX_DEPTH and is_dir:
            for inner in _found(scope, os.path.join(real, name), depth + 1):
                yield os.path.join(name, inner)


def discover_roots(p: dict[str, Any], scope: Scope) -> dict[str, Any]:
    out = []
    for root in p["roots"]:
        answer: dict[str, Any] = {"id": root["id"], "path": uri_from_path(root["path"]),
                                  "plugin": None, "skills": [], "namespaceManifests": [],
                                  "warnings": [], "error": None}
        try:
            os.close(scope.open(root["path"], os.O_PATH, "read")[0])  # RpcError: out of scope
        except OSError as exc:
            answer["error"] = (f"failed to inspect capability root "
                               f"{answer['path']}: {os_error_text(exc)}")
        else:
            for relative in sorted(_found(scope, root["path"]), key=os.fsencode):
                path = os.path.join(root["path"], relative)
                try:
                    contents = _read(path, scope)
                except (OSError, RpcError):
                    continue
                answer["skills"].append({"instructions": {"path": uri_from_path(path),
                                                          "contents": contents},
                                         "metadata": None})
        out.append(answer)
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


def discover_home(p: dict[str, Any], scope: Scope) -> dict[str, Any]:
    """The skills in $CODEX_HOME/skills, looked for through ``scope`` as any fs call's."""
    base = os.path.join(codex_home(), "skills")
    skills = []
    try:
        fd, _ = scope.open(base, os.O_RDONLY | os.O_DIRECTORY, "read")
        try:
            names = sorted(os.listdir(fd), key=os.fsencode)
        finally:
            os.close(fd)
    except (OSError, RpcError):
        names = []
    for name in names:
        path = os.path.join(base, name, SKILL_FILE)
        try:
            fields = front_matter(_read(path, scope))
        except (OSError, RpcError):
            continue
        if not fields.get("name") or not fields.get("description"):
            continue  # not a usable skill: Codex needs both
        skills.append({"name": fields["name"], "description": fields["description"],
                       "shortDescription": None, "path": uri_from_path(path),
                       "discoveryRoot": {"id": "codex-home-skills", "path": uri_from_path(base)},
                       "dependencies": None, "policy": None})
    return {"plugins": [], "skills": skills, "warnings": []}
