"""Capability discovery: Codex skills (``SKILL.md`` files) found on the executor.

``capabilityRoots/discoverV1`` returns, per root, every SKILL.md beneath it with its contents,
in bytewise order of the path under the root, as the reference does. ``capabilities/discoverV2``
lists the skills of $CODEX_HOME/skills/<name>/SKILL.md with the name and description of their
front matter. Plugins and namespace manifests are not looked for (docs/protocol.md says what is
left out).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from execproto import uri_from_path

from ._envconfig import codex_home
from ._posix import os_error_text

SKILL_FILE = "SKILL.md"
MAX_DEPTH = 8  # how deep below a root a SKILL.md is looked for: a bound on the work per root
MAX_SKILL_BYTES = 1 << 20


def _read(path: str) -> str:
    with open(path, "rb") as file:
        return file.read(MAX_SKILL_BYTES).decode("utf-8", "replace")


def _found(root: str, depth: int = 0) -> Iterator[str]:
    """Every SKILL.md under ``root``, as paths relative to it, unsorted."""
    try:
        listing = list(os.scandir(root))
    except OSError:
        return
    for entry in listing:
        if entry.name == SKILL_FILE and entry.is_file():
            yield entry.name
        elif depth < MAX_DEPTH and entry.is_dir(follow_symlinks=False):
            for inner in _found(entry.path, depth + 1):
                yield os.path.join(entry.name, inner)


def discover_roots(p: dict[str, Any], check: Callable[[str], None]) -> dict[str, Any]:
    out = []
    for root in p["roots"]:
        check(root["path"])
        answer: dict[str, Any] = {"id": root["id"], "path": uri_from_path(root["path"]),
                                  "plugin": None, "skills": [], "namespaceManifests": [],
                                  "warnings": [], "error": None}
        try:
            os.stat(root["path"])
        except OSError as exc:
            answer["error"] = (f"failed to inspect capability root "
                               f"{answer['path']}: {os_error_text(exc)}")
        else:
            for relative in sorted(_found(root["path"]), key=os.fsencode):
                path = os.path.join(root["path"], relative)
                try:
                    contents = _read(path)
                except OSError:
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


def discover_home(p: dict[str, Any]) -> dict[str, Any]:
    base = os.path.join(codex_home(), "skills")
    skills = []
    try:
        names = sorted(os.listdir(base), key=os.fsencode)
    except OSError:
        names = []
    for name in names:
        path = os.path.join(base, name, SKILL_FILE)
        try:
            fields = front_matter(_read(path))
        except OSError:
            continue
        if not fields.get("name") or not fields.get("description"):
            continue  # not a usable skill: Codex needs both
        skills.append({"name": fields["name"], "description": fields["description"],
                       "shortDescription": None, "path": uri_from_path(path),
                       "discoveryRoot": {"id": "codex-home-skills", "path": uri_from_path(base)},
                       "dependencies": None, "policy": None})
    return {"plugins": [], "skills": skills, "warnings": []}
