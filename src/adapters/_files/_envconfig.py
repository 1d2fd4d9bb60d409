"""``environmentConfig/read``: the executor's Codex config layers, cut down to the keys asked for.

Layers, lowest precedence first, each only if its file exists and something in it was selected:
the system file (/etc/codex/config.toml), the user's ($CODEX_HOME/config.toml, CODEX_HOME
defaulting to ~/.codex), and the project's (<root>/.codex/config.toml, the root being the git
work tree around ``cwd``, or ``cwd``) only when the user's config trusts that project. The
requirements stack has the system file /etc/codex/requirements.toml. ``cloudInsertionIndex``
is where a cloud layer would go: after the system layers.

Every file is read through the call's `Scope`, as any fs call's: outside ``--fs-root``, or where
the sandbox (and the server's own secrets) deny reading, a layer is as if absent.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

from execproto import INTERNAL_ERROR, RpcError, uri_from_path
from execproto.fs import ReadConfig

from ._beneath import Scope
from ._opening import NotAFile, open_checked

SYSTEM_DIR = "/etc/codex"


def codex_home() -> str:
    return os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")


def _load(path: str, scope: Scope) -> dict[str, Any] | None:
    # TOML's reader and writer are imported by the first environmentConfig/read, not at every
    # start (~2 ms); late imports come from the server's own files, held read-only.
    import tomllib

    try:
        fd, _ = open_checked(scope, path, os.O_RDONLY, "read")
    except (FileNotFoundError, NotADirectoryError, RpcError, NotAFile):
        return None
    try:
        with open(fd, "rb") as file:
            return tomllib.load(file)
    except tomllib.TOMLDecodeError as exc:
        raise RpcError(INTERNAL_ERROR, f"failed to parse {path}: {exc}") from None


def select(document: dict[str, Any], paths: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The part of ``document`` under any of ``paths`` (key paths), in document order."""
    out: dict[str, Any] = {}
    for name, item in document.items():
        under = [path[1:] for path in paths if path and path[0] == name]
        if not under:
            continue
        if any(not rest for rest in under):
            out[name] = item  # selected whole
        elif isinstance(item, dict):
            inner = select(item, under)
            if inner:
                out[name] = inner
    return out


def _project_root(cwd: str, scope: Scope) -> str:
    here = cwd
    while True:
        if scope.exists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return cwd
        here = parent


def _trusted(user: dict[str, Any] | None, root: str) -> bool:
    projects = (user or {}).get("projects")
    entry = projects.get(root) if isinstance(projects, dict) else None
    return isinstance(entry, dict) and entry.get("trust_level") == "trusted"


def _stack(files: list[tuple[str, str, str]], paths: Sequence[Sequence[str]],
           system: int, scope: Scope) -> dict[str, Any]:
    """``files``: (source label, file, base dir). ``system``: how many lead as system layers."""
    layers = []
    inserted = 0
    for index, (source, path, base) in enumerate(files):
        document = _load(path, scope)
        chosen = select(document, paths) if document is not None else {}
        if chosen:
            from . import _toml

            layers.append({"source": source, "baseDir": uri_from_path(base),
                           "toml": _toml.dumps(chosen)})
            inserted += index < system
    return {"layers": layers, "cloudInsertionIndex": inserted}


def read(request: ReadConfig, scope: Scope) -> dict[str, Any]:
    home = codex_home()
    user_file = os.path.join(home, "config.toml")
    system_file = os.path.join(SYSTEM_DIR, "config.toml")
    files = [(f"system ({system_file})", system_file, SYSTEM_DIR),
             (f"user ({user_file})", user_file, home)]
    root = _project_root(os.path.normpath(request.cwd), scope)
    if _trusted(_load(user_file, scope), root):
        project_dir = os.path.join(root, ".codex")
        project_file = os.path.join(project_dir, "config.toml")
        files.append((f"project ({project_file})", project_file, project_dir))
    requirements = os.path.join(SYSTEM_DIR, "requirements.toml")
    return {
        "userHomeDir": uri_from_path(os.path.expanduser("~")),
        "codexHomeDir": uri_from_path(home),
        "hostname": socket.gethostname(),
        "config": _stack(files, request.config_paths, system=1, scope=scope),
        "requirements": _stack([(requirements, requirements, SYSTEM_DIR)],
                               request.requirements_paths, system=1, scope=scope),
    }
