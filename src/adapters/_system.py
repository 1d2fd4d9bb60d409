"""What every room words or reads of the operating system the same way: an OS error as the
reference words it, and a link's target as the core's `pinned` reads the file system.

Shared like `_loop` and `_shares`, below the rooms: the files room and the processes room both
answer with the reference's words, and neither reaches into the other for them.
"""

from __future__ import annotations

import errno
import os

# The reference is built with musl, whose words differ from glibc's for these errors.
_MUSL_WORDS = {
    errno.ELOOP: "Symbolic link loop", errno.ENAMETOOLONG: "Filename too long",
    errno.EIO: "I/O error", errno.EBUSY: "Resource busy", errno.ESPIPE: "Invalid seek",
    errno.EXDEV: "Cross-device link", errno.EOVERFLOW: "Value too large for data type",
    errno.EMFILE: "No file descriptors available", errno.ENOTTY: "Not a tty",
    errno.ENOMEM: "Out of memory", errno.EDQUOT: "Quota exceeded",
    errno.ENOTSUP: "Not supported", errno.EDEADLK: "Resource deadlock would occur",
}


def os_error_text(exc: OSError) -> str:
    """An OS error as the reference words it: "No such file or directory (os error 2)"."""
    code = exc.errno or 0
    return f"{_MUSL_WORDS.get(code) or os.strerror(code)} (os error {exc.errno})"


def readlink(path: str) -> str | None:
    """The target of the symlink at ``path``, None for anything else (missing included): how
    the core's `pinned` reads the file system when it resolves a policy's rules."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def which(name: str, path: str | None = None) -> str | None:
    """`shutil.which` on Linux, the same answers: ``name`` where it holds a slash, else the
    first executable non-directory ``name`` in ``path`` (default $PATH, else the system's).
    Here because a server's start looks programs up and importing shutil, which imports the
    bz2 and lzma modules, would add ~1.5 ms to it."""
    def runnable(file: str) -> bool:
        return os.path.exists(file) and os.access(file, os.F_OK | os.X_OK) \
            and not os.path.isdir(file)

    if os.path.dirname(name):
        return name if runnable(name) else None
    if path is None:
        path = os.environ.get("PATH")
        if path is None:
            try:
                path = os.confstr("CS_PATH")
            except (AttributeError, ValueError):
                path = os.defpath
    seen: set[str] = set()
    for directory in path.split(os.pathsep) if path else ():
        if directory not in seen:
            seen.add(directory)
            if runnable(file := os.path.join(directory, name)):
                return file
    return None
