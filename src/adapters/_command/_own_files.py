"""What the server runs or loads, read-only to every sandbox (`Config.protected`).

The server runs code after it starts, as itself and outside every sandbox: the stage and
the wrappers at each sandboxed start, modules it imports late (the TLS layer, libseccomp's
binding), a `--backend` module, and the programs in `--path-prepend` that unsandboxed
processes find first. A sandbox allowed to write any of them would run its code outside at
the next use, so each is held read-only in every sandbox, at its name and at its real path
(`Policy.capped`), whatever a request grants; an operator's `--writable-root` that overlaps
one is refused at start.

Held: the interpreter's file and its installation (`sys.base_prefix`), the environment it
runs in (`sys.prefix`: a venv), every directory on `sys.path` (the installed packages, an
editable install's sources), execproto's own code, the wrappers (setpriv, setsid,
bubblewrap, pasta, the shell of the cgroup wrapper, where the server finds them),
`--path-prepend`, a `--backend` module and the TLS certificate; and what the C library and
the dynamic loader load or trust for all of these after the start (`_loaded`: the loader's
preload list and cache, the libraries, the name service, OpenSSL's configuration and trust
store), and the standard library zip the interpreter would take from a directory above its
installation (`zip_landmarks`, held while missing). Not `python -m`'s current
directory: a server started in a workspace would make the workspace read-only, so `serve`
takes it off `sys.path` instead (`forget_cwd`), and nothing is imported from there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from .._system import which

# The programs the server runs around a process, found on its PATH as `_posix`, `_cgroups`
# and `backends` find them (and on the system's, where `_cgroups` looks).
# The server runs each by its real path (`_posix.real_program`): a link to one, its name here,
# is no more than a directory entry, which a writable root may replace.
WRAPPERS = ("setpriv", "setsid", "bwrap", "pasta", "nft", "nsenter", "sh")
# The tools the cgroup watchdog's shell runs (`_cgroups.WATCHDOG`), as the server, the last
# ones after the server is gone: by name, on the wrappers' PATH.
WATCHDOG_TOOLS = ("cat", "grep", "sleep", "find", "rmdir")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def forget_cwd() -> None:
    """Take the current directory off `sys.path` (`python -m` puts it first): a module
    planted there would be imported by a late import. A `--backend` module next to the
    operator is found all the same (it is appended for that load only, see cli)."""
    here = os.getcwd()
    sys.path[:] = [entry for entry in sys.path if entry not in ("", here)]


def protected(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The paths to hold read-only: those the module's docstring lists, and ``extra``
    (`--path-prepend`, the certificate, a backend module's file), each as named and real."""
    import execproto

    from . import _loaded  # (glob, the ELF reader) with the core, not at the start

    adapters = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    here = os.getcwd()
    interpreters = [sys.executable, getattr(sys, "_base_executable", sys.executable)]
    programs = [which(name, path=where) or "" for name in (*WRAPPERS, *WATCHDOG_TOOLS)
                for where in (None, SYSTEM_PATH)]
    named = [*interpreters,
             sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *(entry for entry in sys.path if entry and entry != here),
             os.path.dirname(execproto.__file__), adapters, *programs, *extra,
             *_loaded.held([*interpreters, *programs])]
    held: dict[str, None] = {}  # a set, in the order met
    real = _RealPaths()
    for path in named:
        if path and os.path.lexists(path):
            held[os.path.abspath(path)] = held[real(path)] = None
    # Held whether or not they are there: missing, the sandbox meets an empty read-only
    # directory in their place, which neither the loader nor the interpreter takes.
    for path in (*_loaded.MISSING_HELD, *zip_landmarks(interpreters)):
        held[path] = None
    return tuple(path for path in held if not _under_another(path, held))


def _under_another(path: str, held: dict[str, None]) -> bool:
    """Whether a directory above ``path`` is held already: its cap holds ``path`` too, and
    each cap costs every sandboxed start a look (an extension module in the held
    `lib-dynload`, a missing zip inside the held installation)."""
    here = os.path.dirname(path)
    while here != os.path.dirname(here):
        if here in held:
            return True
        here = os.path.dirname(here)
    return False


def zip_landmarks(interpreters: Iterable[str]) -> list[str]:
    """Where each interpreter looks for its standard library as a zip before anything else:
    `lib/python3XY.zip` in its real directory and in every one above. The first found there
    is taken as its prefix, and its modules run before any other (getpath's search), so a
    sandbox allowed `/` would otherwise put a `/root/lib/python311.zip` of its own in the
    way of every interpreter the server starts later (the stage server, the network holder).
    """
    name = os.path.join(sys.platlibdir, f"python{sys.version_info[0]}{sys.version_info[1]}.zip")
    found: dict[str, None] = {}
    for interpreter in interpreters:
        here = os.path.dirname(os.path.realpath(interpreter))
        while here != os.path.dirname(here):
            found[os.path.join(here, name)] = None
            here = os.path.dirname(here)
    return list(found)


class _RealPaths:
    """`os.path.realpath`, each directory resolved once: the libraries are a hundred files
    in a few directories, each reached through a link (`/lib`)."""

    def __init__(self) -> None:
        self._directories: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        directory, name = os.path.split(os.path.abspath(path))
        if directory not in self._directories:
            self._directories[directory] = os.path.realpath(directory)
        path = os.path.join(self._directories[directory], name)
        return os.path.realpath(path) if os.path.islink(path) else path


def overlap(root: str, paths: Iterable[str]) -> str | None:
    """The first of ``paths`` that ``root`` contains or lies in, or None."""
    real = os.path.realpath(root)
    for path in paths:
        if _beneath(path, real) or _beneath(real, path):
            return path
    return None


def _beneath(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top + "/")
