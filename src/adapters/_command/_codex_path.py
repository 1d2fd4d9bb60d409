"""The programs a model expects to find on PATH: a directory, private to one server, that
`serve` puts first on the PATH its processes inherit and names in ``prependPathDirs``.

The reference (codex 0.171) does the same with two directories: a fresh one under its home
(``tmp/arg0-linux/codex-arg0XXXXXX``, with ``apply_patch`` and ``applypatch`` links to its own
binary, which acts on the name it is run by), then its bundled ``codex-path`` (with ``rg``);
it announces the second only. Here one directory holds:

- ``apply_patch``, running `_apply_patch` with the server's own interpreter and import path
  (``-I``: nothing of the caller's environment, PYTHONPATH say, changes what it imports);
- ``applypatch``, the reference's second name for it;
- ``rg``, a link to the host's ripgrep, when the host has one.

The directory is among what the server runs (`Config.protected`), so it is read-only in every
sandbox and nothing a command writes changes what the next one runs. It lives in the user's
cache directory (``$XDG_CACHE_HOME/execproto`` or ``~/.cache/execproto``), else the runtime
directory, else the temporary directory, the first that no operator's ``--writable-root``
takes in; and is removed when the server exits. Not the temporary directory first: Codex's
workspace-write profile makes ``/tmp`` and ``$TMPDIR`` writable, and this server holds its
directory read-only only in its own sandboxes, so a sandbox of another server of the same
user (or of a local ``codex``) could rewrite the program this one's processes run; the
reference keeps its own under ``$CODEX_HOME`` for the same reason. One left by a server that
was killed is removed by the next one: each holds a lock on the ``.lock`` file in its own, so
an unlocked one is nobody's; what a sandbox planted in the parent is removed the same way, as
files (a link in it is not followed, a FIFO named ``.lock`` not waited on).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import sys
from collections.abc import Callable, Iterable

from .._system import which

PREFIX = "execproto-path-"
LOCK = ".lock"
MAX_SWEPT = 64  # stale directories removed at one start, at most
MAX_NAMES = 100  # random names tried for a new directory, as tempfile's TMP_MAX
# The program: the server's interpreter, isolated from the caller's environment (``-I``),
# with the server's import path. A script of its own (``#!``) where the kernel can take the
# interpreter's path there (no blank in it, and short enough); else through sh, which says
# a word of its own when started in a directory since removed.
HEADER = "# apply_patch for the processes of an execproto server (made by execproto serve, " \
         "removed when it exits).\n"
SCRIPT = "#!{python} -I\n" + HEADER + "{code}\n"
THROUGH_SH = "#!/bin/sh\n" + HEADER + 'exec {python} -I -c {code} "$@"\n'
CODE = ("import sys; sys.path[:] = {path!r}; "
        "from execproto.adapters._command._apply_patch import main; sys.exit(main())")
SHEBANG_MAX = 200  # bytes of a #! line: Linux takes 255 since 5.1, 127 before
NAMES = ("apply_patch", "applypatch")

_locks: dict[str, int] = {}  # directory made here -> its held lock's descriptor


def make(avoid: Iterable[str] = (), rg: str | None = None) -> str:
    """Make the directory, register its removal at exit, and return its path. ``avoid``: the
    directories it must not be in (the operator's writable roots); ``rg``: the ripgrep to link
    (default: the one on the server's PATH, if any)."""
    parent = _parent(list(avoid))
    _sweep(parent)
    path = _new_directory(parent)
    try:
        _lock(path)
        program = os.path.join(path, NAMES[0])
        with open(os.open(program, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755), "w") as file:
            file.write(program_text())
        for alias in NAMES[1:]:
            os.symlink(NAMES[0], os.path.join(path, alias))
        rg = rg or which("rg")
        if rg:
            os.symlink(os.path.abspath(rg), os.path.join(path, "rg"))
        os.chmod(path, 0o755)  # readable by a process that runs as another user
    except BaseException:
        remove(path)
        raise
    atexit.register(_remove_at_exit, path, os.getpid())
    return path


def program_text(python: str = sys.executable) -> str:
    code = CODE.format(path=[entry for entry in sys.path if os.path.isabs(entry)])
    if len(python.encode()) < SHEBANG_MAX and not any(c.isspace() for c in python):
        return SCRIPT.format(python=python, code=code)
    import shlex  # where the interpreter's path needs a shell: rare, and not at every start

    return THROUGH_SH.format(python=shlex.quote(python), code=shlex.quote(code))


def remove(path: str) -> None:
    """Remove a directory `make` made (again is nothing)."""
    try:
        _remove_flat(path)
    except FileNotFoundError:
        pass
    except OSError:  # not as made (a directory in it, say): the general way
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    fd = _locks.pop(path, None)
    if fd is not None:
        os.close(fd)


def _remove_flat(path: str) -> None:
    """Remove the directory and the files and links `make` put in it, without shutil (which
    a start would import for it, sweeping a killed server's: ~1.5 ms)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in os.listdir(fd):
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _remove_at_exit(path: str, maker: int) -> None:
    if os.getpid() == maker:  # not in a forked child that exits through Python
        remove(path)


def _parent(avoid: list[str]) -> str:
    """Where to make the directory: the first of the usual places that no writable root
    holds (a writable root over it would be refused at start, see `_own_files.overlap`), the
    shared temporary directory last (see the module's docstring)."""
    from ._own_files import overlap

    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    places: tuple[Callable[[], str], ...] = (
        lambda: os.path.join(cache, "execproto"), lambda: runtime, _temporary)
    for where in places:
        candidate = where()
        if not (candidate and os.path.isabs(candidate)):
            continue
        if any(overlap(root, [os.path.realpath(candidate)]) for root in avoid):
            continue
        try:
            os.makedirs(candidate, mode=0o755, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    raise OSError("no directory to make the apply_patch directory in: the temporary, runtime "
                  "and cache directories are all under a --writable-root, or cannot be written")


def _temporary() -> str:
    """The shared temporary directory, as `tempfile` finds it: imported only where the cache
    and runtime directories would not do (tempfile loads shutil, random and more: ~3 ms of a
    server's start)."""
    import tempfile

    return tempfile.gettempdir()


def _new_directory(parent: str) -> str:
    """A new directory of ours in ``parent``, as `tempfile.mkdtemp` makes one (a random name,
    mode 0700, never an existing path), without importing it."""
    for _ in range(MAX_NAMES):
        path = os.path.join(parent, PREFIX + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no unused name for the apply_patch directory in {parent}")


def _lock(path: str) -> None:
    """Hold the directory's lock for the server's life. The file is made and locked under
    another name, then renamed: a sweep never sees the lock before it is held."""
    making = os.path.join(path, LOCK + ".new")
    fd = os.open(making, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    _locks[path] = fd
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(making, os.path.join(path, LOCK))


def _sweep(parent: str) -> None:
    """Remove the directories of servers that are gone: ours by owner and name, with a lock
    file nobody holds."""
    swept = 0
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if swept >= MAX_SWEPT:
            return
        if not entry.name.startswith(PREFIX) or entry.path in _locks:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(
                    follow_symlinks=False).st_uid != os.geteuid():
                continue
            # Not blocking: a FIFO planted as the lock would hold the start here for ever.
            fd = os.open(os.path.join(entry.path, LOCK), os.O_RDONLY | os.O_NOFOLLOW
                         | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # no lock yet (being made), or not ours to look into
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its server is alive
        finally:
            os.close(fd)  # (closing also releases a lock just taken)
        remove(entry.path)
        swept += 1
