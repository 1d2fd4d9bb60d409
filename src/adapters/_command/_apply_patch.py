"""``apply_patch``: Codex's patch format applied to the files here, as the reference's
``apply_patch`` (codex 0.171) applies it, text for text and file for file.

Models call it from the shell (``apply_patch <<'EOF' ... EOF``, or with the patch as its one
argument), so `serve` puts a program of that name first on the PATH its processes inherit
(`_codex_path`); ``execproto apply_patch`` is the same command.

What the reference does, and so this does (measured, tests/adapters/test_apply_patch.py):

- The patch is the one argument, or else all of stdin. Exit 0 and a summary on stdout
  (``A``dded, ``M``odified, ``D``eleted, each path as the patch spelled it); 1 and one message
  on stderr when the patch is malformed or a hunk fails; 2 for a usage error (no patch, or
  more than one argument).
- Hunks are applied in order, each at once: a failure leaves the ones before it done.
- Paths are taken against the current directory by name (``..`` is not resolved through
  links), and may be absolute or lead out of it: the sandbox, not this, bounds what is written.
- A file is written in place (its mode, links and hard links stay), created 0666 less the
  umask with its missing parent directories; an update reads it as UTF-8 and refuses anything
  but a regular file; a delete or a move's source must be no directory. A move writes the
  destination, then removes the source (so moving a file onto itself deletes it, as there).
- The reference is built with musl, whose texts for some errors differ from glibc's: its
  words are used (`MUSL`).
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from typing import BinaryIO

from . import _patch
from ._patch import Add, Delete, PatchError, Update

OK, FAILED, USAGE = 0, 1, 2

USAGE_TEXT = "Usage: apply_patch 'PATCH'\n       echo 'PATCH' | apply_patch\n"

# musl's strerror, where it says something other than glibc's (the reference is a static
# musl build, and a Rust I/O error shows that text).
MUSL = {
    errno.ELOOP: "Symbolic link loop",
    errno.ENAMETOOLONG: "Filename too long",
    errno.EMFILE: "No file descriptors available",
    errno.EBUSY: "Resource busy",
    errno.EDQUOT: "Quota exceeded",
    errno.ENOMEM: "Out of memory",
    errno.EOVERFLOW: "Value too large for data type",
    errno.EOPNOTSUPP: "Not supported",
    errno.EIO: "I/O error",
    errno.ENOTTY: "Not a tty",
    errno.ESPIPE: "Invalid seek",
    errno.EADDRINUSE: "Address in use",
    errno.ECHILD: "No child process",
    errno.ETIMEDOUT: "Operation timed out",
}

DESCRIPTION = """\
Apply a patch in Codex's format (*** Begin Patch ... *** End Patch) to the files under the
current directory, as the apply_patch of the Codex CLI does. The patch is the one argument,
or else stdin: apply_patch <<'EOF' ... EOF.

Exit status: 0 applied (the files changed are listed on stdout); 1 the patch is malformed or
a hunk does not apply (hunks before it stay applied); 2 no patch, or more than one argument.
"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    command: argparse.ArgumentParser = commands.add_parser(
        "apply_patch", help="apply a Codex patch to the files here", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_argument("patch", nargs=argparse.REMAINDER, metavar="PATCH",
                         help="the patch (default: read from stdin)")
    return command


def run(args: argparse.Namespace) -> int:
    return main(args.patch)


def main(argv: list[str] | None = None) -> int:
    """The command, with its arguments (the program's own name left out)."""
    argv = sys.argv[1:] if argv is None else argv
    out, err = sys.stdout.buffer, sys.stderr.buffer
    if argv:
        text = argv[0]
        try:
            text.encode("utf-8")  # bytes that were no UTF-8 are surrogates here
        except UnicodeError:
            return _say(err, "Error: apply_patch requires a UTF-8 PATCH argument.\n", FAILED)
    else:
        data = sys.stdin.buffer.read()
        if not data:
            return _say(err, USAGE_TEXT, USAGE)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return _say(err, "Error: Failed to read PATCH from stdin.\n"
                             "stream did not contain valid UTF-8\n", FAILED)
    if len(argv) > 1:
        return _say(err, "Error: apply_patch accepts exactly one argument.\n", USAGE)
    try:
        cwd = os.getcwd()
    except OSError as error:  # removed, say
        return _say(err, "Error: Failed to determine current directory.\n"
                         f"{_os_error(error)}\n", FAILED)
    return apply(text, cwd, out, err)


def _say(stream: BinaryIO, text: str, status: int) -> int:
    try:
        stream.write(text.encode("utf-8"))
        stream.flush()
    except OSError:  # a closed stdout, say: what was done is done, and it failed to say so
        return FAILED
    return status


def apply(text: str, cwd: str, out: BinaryIO, err: BinaryIO) -> int:
    """Apply the patch ``text`` with relative paths taken against ``cwd``."""
    added: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []
    try:
        hunks = _patch.parse(text)
        if not hunks:
            raise PatchError("No files were modified.")
        for hunk in hunks:
            match hunk:
                case Add():
                    added.append(_add(hunk, cwd))
                case Delete():
                    deleted.append(_delete(hunk, cwd))
                case Update():
                    modified.append(_update(hunk, cwd))
    except PatchError as error:
        return _say(err, f"{error}\n", FAILED)
    return _say(out, _patch.summary(added, modified, deleted), OK)


def _add(hunk: Add, cwd: str) -> str:
    _write_creating_parents(_patch.resolved(cwd, hunk.path), hunk.contents)
    return hunk.path


def _delete(hunk: Delete, cwd: str) -> str:
    path = _patch.resolved(cwd, hunk.path)
    _remove(path, f"Failed to delete file {path}")
    return hunk.path


def _update(hunk: Update, cwd: str) -> str:
    path = _patch.resolved(cwd, hunk.path)
    contents = _patch.updated(_read_text(path), hunk.chunks, path)
    if hunk.move_to is None:
        _write(path, contents, f"Failed to write file {path}")
        return hunk.path
    _write_creating_parents(_patch.resolved(cwd, hunk.move_to), contents)
    _remove(path, f"Failed to remove original {path}")
    return hunk.move_to


def _read_text(path: str) -> str:
    def failed(why: str) -> PatchError:
        return PatchError(f"Failed to read file to update {path}: {why}")

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise failed(f"path `{path}` is not a file")
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise failed(_os_error(error)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise failed(_utf8_error(error)) from None


def _write(path: str, contents: str, failure: str) -> None:
    try:
        _write_file(path, contents)
    except OSError:
        raise PatchError(failure) from None


def _write_creating_parents(path: str, contents: str) -> None:
    """Write ``path``, making its missing parent directories when the first try finds one
    missing (and only then)."""
    try:
        _write_file(path, contents)
        return
    except FileNotFoundError:
        pass
    except OSError:
        raise PatchError(f"Failed to write file {path}") from None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError:
        raise PatchError(f"Failed to create parent directories for {path}") from None
    _write(path, contents, f"Failed to write file {path}")


def _write_file(path: str, contents: str) -> None:
    # In place, as Rust's fs::write: a link is followed, the mode and hard links stay.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    with open(fd, "wb") as file:
        file.write(contents.encode("utf-8"))


def _remove(path: str, failure: str) -> None:
    """Unlink ``path``, which must lead to something (a link is removed, not what it leads
    to) that is no directory."""
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            raise PatchError(failure)
        os.unlink(path)
    except OSError:
        raise PatchError(failure) from None


def _os_error(error: OSError) -> str:
    """An OS error as a Rust `io::Error` from the reference shows it."""
    if error.errno is None:
        return str(error)
    text = MUSL.get(error.errno) or os.strerror(error.errno)
    return f"{text} (os error {error.errno})"


def _utf8_error(error: UnicodeDecodeError) -> str:
    """A decoding error as Rust's `Utf8Error` words it."""
    if error.reason == "unexpected end of data":
        return f"incomplete utf-8 byte sequence from index {error.start}"
    return f"invalid utf-8 sequence of {error.end - error.start} bytes from index {error.start}"
