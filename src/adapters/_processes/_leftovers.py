"""The placeholders a killed server leaves on the host, written down as they are made and
removed by the next server's start.

A placeholder (`_placeholders.Placeholders`) lives on the host from the first sandbox that
mounts on it to the end of the last; a server killed with SIGKILL never sees that end, and
leaves it: an empty `.git` in a workspace, an empty directory at `/etc/ld.so.preload` or
`/root/lib/python311.zip` (which made an attack test skip). So a server writes down each
placeholder it makes (`Journal`), and the next server removes what a server that is gone
wrote down (`sweep`), before its own first sandbox.

Why nothing a sandbox can write makes the sweep remove, or follow, anything else:

- The records lie in a directory of the server's user's own (`directory`: mode 0700 in the
  cache of the user's home, every directory above it the user's or root's and writable by no
  one else), held read-only in every sandbox as the server's own files are (`_bwrap` caps
  it). A record is read only if it is a regular file of the user's that no one else may read
  or write, with one link; and only once its writer is gone: each server holds a lock on its
  own for its life, and the pid it names no longer runs the process that wrote it (its start
  time, the boot).
- A placeholder is written down twice: its path before it is made, then its device and inode
  once the server made it itself, by descriptor (`Journal.make`); and it is struck off before
  it is removed. Each window a kill can fall in leaves a placeholder behind rather than
  removing something. The sweep removes only what was written down made and not struck off,
  and only if the entry at that path is still that directory: every directory on the way
  opened from `/` with O_NOFOLLOW, the entry a directory (a link is not one), of the same
  device and inode, and empty (rmdir removes nothing else, and follows no link).
- What a sandbox can still do is make the sweep leave one (fill it, replace it). An empty
  directory swapped in between the check and the rmdir would go instead: only one that may
  write beside it can do that, and it could remove that directory itself.

A placeholder another sandbox binds as it found it (one of a server that is gone, taken as
the host's) loses that bind when it is removed, as when its own server removes it at its last
sandbox's end; the sweep runs before this server's first sandbox, so only another live
server's sandboxes can be in that place.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import pwd
import stat
import time

log = logging.getLogger("execproto")

HEADER = "execproto placeholders 1"
# Bytes of one record a sweep reads: past what a server writes (it starts its record afresh
# whenever nothing is live, and rewrites it past `COMPACT_AT`). A bigger one is left.
MAX_RECORD = 1 << 20
COMPACT_AT = 64 * 1024
# A sweep runs before the server's first sandboxed start: what it has not done in this time
# waits for the next server.
MAX_SECONDS = 1.0
# A record without its header yet, younger than this, may be a live server's in the making.
MAKING = 10.0

_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_found: list[str | None] = []  # `directory`'s answer, once found


def directory() -> str | None:
    """The records' directory (``~/.cache/execproto/placeholders`` of the server's user, by
    its passwd entry, so that every server of the user finds the same), made if missing; None
    where it cannot be private (then nothing is written down, nor swept)."""
    if not _found:
        _found.append(_find())
    return _found[0]


def _find() -> str | None:
    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
        path = os.path.join(home, ".cache", "execproto", "placeholders")
        os.makedirs(path, mode=0o700, exist_ok=True)
        real = os.path.realpath(path)
    except (KeyError, OSError):
        return None
    fd = _open_private(real)
    if fd is None:
        log.debug("placeholders are not written down: %s is not private to this user", real)
        return None
    os.close(fd)
    return real


def _open_private(path: str) -> int | None:
    """An O_PATH descriptor of the directory ``path`` (a real path), if only this user (and
    root) can change it: it, and every directory above it, owned by either and writable by no
    one else; it of mode 0700. Reached through no symlink."""
    uid = os.geteuid()
    parts = [part for part in path.split("/") if part]
    if not parts:
        return None
    fd = os.open("/", _DIR)
    try:
        for part in parts:
            step = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = step
            found = os.fstat(fd)
            if found.st_uid not in (0, uid) or found.st_mode & 0o022:
                raise PermissionError(path)
        if found.st_uid != uid or found.st_mode & 0o077:
            raise PermissionError(path)
    except OSError:
        os.close(fd)
        return None
    return fd


def _identity(pid: int) -> tuple[str, str] | None:
    """The start time (clock ticks since boot) of process ``pid`` and the boot's id; None if
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            start = file.read().rsplit(b")", 1)[1].split()[19].decode()
        with open("/proc/sys/kernel/random/boot_id") as file:
            boot = file.read().strip()
    except (OSError, IndexError):
        return None
    return start, boot


class Journal:
    """This server's record of the placeholders it made and has not removed: one file in the
    records' directory, locked for the server's life and appended to, a line a change, each
    path in hex (a path may hold a newline):

        ? PATH             about to be made
        + DEV INO PATH     made, by the server: this device and inode
        x PATH             not made by the server after all (there already, or not possible)
        - DEV INO PATH     struck off: about to be removed, or no longer the server's

    Used under the `Placeholders` lock only."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._name = ""
        self._head = ""  # the record's first line: its writer
        self._tried = False
        self._live: dict[str, tuple[int, int]] = {}  # by path, its device and inode

    def make(self, paths: list[str]) -> None:
        """Make each of ``paths`` (missing placeholders, shallow first) an empty directory,
        written down before and after. One the server cannot make (made meanwhile, a parent
        gone or turned to a link, no right to write there), or any where there is no record,
        is left to the stage, which makes it as it always did; a sweep leaves such one."""
        if self._open() is None:
            return
        self._write("".join(f"? {_hex(path)}\n" for path in paths))
        done = []
        for path in paths:
            made = _make_directory(path)
            if made is None:
                done.append(f"x {_hex(path)}\n")
            else:
                self._live[path] = made
                done.append(f"+ {made[0]} {made[1]} {_hex(path)}\n")
        self._write("".join(done))

    def forget(self, path: str) -> None:
        """Strike ``path`` off, before it is removed: killed in between, the server leaves it
        on the host rather than have a sweep remove what may be there later."""
        made = self._live.pop(path, None)
        if made is None or self._fd is None:
            return
        try:
            if not self._live:  # nothing live: the record starts afresh (the header only)
                os.ftruncate(self._fd, len(self._head.encode()))
            elif os.fstat(self._fd).st_size > COMPACT_AT:
                self._compact()
            else:
                _write(self._fd, f"- {made[0]} {made[1]} {_hex(path)}\n")
        except OSError:  # a full disk, say: a sweep then finds it gone, or not the same
            log.debug("striking a placeholder off failed", exc_info=True)

    def _open(self) -> int | None:
        """The record, made at the first placeholder: under a name of its own, locked and
        headed before it is renamed to its name, so that a sweep never reads it unlocked."""
        if self._fd is not None or self._tried:
            return self._fd
        self._tried = True
        start, boot = _identity(os.getpid()) or ("", "")
        self._head = f"{HEADER} {os.getpid()} {start} {boot}\n"
        try:
            self._fd, self._name = self._new(self._head)
        except OSError:
            log.debug("placeholders are not written down: no record", exc_info=True)
            return None
        atexit.register(self._close, os.getpid())
        return self._fd

    def _new(self, text: str) -> tuple[int, str]:
        where = directory()
        if where is None:
            raise OSError("no private directory for the records of placeholders")
        at = _open_private(where)
        if at is None:
            raise OSError(f"{where} is not private to this user")
        try:
            name = self._name or f"{os.getpid()}-{os.urandom(6).hex()}"
            making = f".{name}-{os.urandom(4).hex()}"
            fd = os.open(making, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND |
                         os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=at)
            try:
                # Waits only for a sweep that opened it first: it lets go at once (no header)
                fcntl.flock(fd, fcntl.LOCK_EX)
                _write(fd, text)
                os.rename(making, name, src_dir_fd=at, dst_dir_fd=at)
            except BaseException:
                os.close(fd)
                raise
            return fd, name
        finally:
            os.close(at)

    def _compact(self) -> None:
        """The record written again with only what is live, renamed over the old one."""
        assert self._fd is not None
        lines = [f"+ {dev} {ino} {_hex(path)}\n" for path, (dev, ino) in self._live.items()]
        try:
            fd, _ = self._new(self._head + "".join(lines))
        except OSError:
            return  # the old one stands, which says the same
        os.close(self._fd)
        self._fd = fd

    def _write(self, text: str) -> None:
        if self._fd is not None:
            try:
                _write(self._fd, text)
            except OSError:  # a full disk: what is not written down is left, not removed
                log.debug("writing the placeholders down failed", exc_info=True)

    def _close(self, maker: int) -> None:
        """At the server's exit: its record goes when nothing it made is left."""
        if os.getpid() != maker or self._fd is None:
            return  # not in a forked child that exits through Python
        if not self._live and (where := directory()) is not None:
            try:
                os.unlink(os.path.join(where, self._name))
            except OSError:
                pass
        os.close(self._fd)
        self._fd = None


def _write(fd: int, text: str) -> None:
    view = memoryview(text.encode())
    while view:
        view = view[os.write(fd, view):]


def _hex(path: str) -> str:
    return os.fsencode(path).hex()


def _parent(path: str) -> tuple[int, str] | None:
    """An O_PATH descriptor of ``path``'s directory, every directory on the way opened from
    `/` with O_NOFOLLOW, and the last name; None if there is none such (a link on the way)."""
    parts = path.split("/")
    if not path.startswith("/") or os.path.normpath(path) != path or len(parts) < 2:
        return None
    fd = os.open("/", _DIR)
    try:
        for part in parts[1:-1]:
            step = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = step
    except OSError:
        os.close(fd)
        return None
    return fd, parts[-1]


def _make_directory(path: str) -> tuple[int, int] | None:
    """``path`` made an empty directory by descriptor (as the stage makes one, mode 0755), and
    its device and inode; None if it was there or could not be made so."""
    found = _parent(path)
    if found is None:
        return None
    parent, name = found
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
        made = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(parent)
    return (made.st_dev, made.st_ino) if stat.S_ISDIR(made.st_mode) else None


def _remove(path: str, made: tuple[int, int]) -> str:
    """Remove the placeholder ``made`` (device, inode) at ``path`` if it is still there and
    empty: "removed", "gone" (nothing there), or "left"."""
    found = _parent(path)
    if found is None:
        return "left"
    parent, name = found
    try:
        there = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(there.st_mode) or (there.st_dev, there.st_ino) != made:
            return "left"
        os.rmdir(name, dir_fd=parent)  # refuses a directory that is not empty
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "left"
    finally:
        os.close(parent)
    return "removed"


def _read(text: str) -> tuple[tuple[int, str, str] | None, dict[str, tuple[int, int]], set[str]]:
    """A record's writer (pid, start, boot), the placeholders it made and did not strike off,
    and the paths it was about to make and never said it made."""
    lines = text.split("\n")
    head = lines[0].split(" ")
    writer = None
    if lines[0].startswith(HEADER + " ") and len(head) == 6 and head[3].isdigit():
        writer = (int(head[3]), head[4], head[5])
    live: dict[str, tuple[int, int]] = {}
    unsure: set[str] = set()
    for line in lines[1:-1]:  # the last is what follows the last newline: cut short, or none
        fields = line.split(" ")
        try:
            path = os.fsdecode(bytes.fromhex(fields[-1]))
            if fields[0] == "?" and len(fields) == 2:
                unsure.add(path)
            elif fields[0] == "x" and len(fields) == 2:
                unsure.discard(path)
            elif fields[0] == "+" and len(fields) == 4:
                live[path] = (int(fields[1]), int(fields[2]))
                unsure.discard(path)
            elif fields[0] == "-" and len(fields) == 4:
                if live.get(path) == (int(fields[1]), int(fields[2])):
                    del live[path]
        except ValueError:
            continue
    return writer, live, unsure


def sweep() -> bool:
    """Remove the placeholders that servers of this user which are gone left, and their
    records; for a server's start, before its first sandbox. Whether it removed any. Never
    raises."""
    try:
        return _sweep()
    except Exception:  # noqa: BLE001 - a failed sweep leaves what it found, nothing more
        log.debug("the sweep of placeholders failed", exc_info=True)
        return True  # it may have removed some


def _sweep() -> bool:
    where = directory()
    if where is None:
        return False
    at = _open_private(where)
    if at is None:
        return False
    ends = time.monotonic() + MAX_SECONDS
    removed = False
    try:
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=at)
        try:
            names = sorted(os.listdir(listing))
        finally:
            os.close(listing)
        for name in names:
            if time.monotonic() > ends:
                break
            removed = _sweep_record(at, name, ends) or removed
    finally:
        os.close(at)
    return removed


def _sweep_record(at: int, name: str, ends: float) -> bool:
    """Sweep the record ``name``, if it is trusted and its server gone; whether anything was
    removed."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=at)
    except OSError:
        return False  # a link, gone meanwhile
    try:
        found = os.fstat(fd)
        if (not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid()
                or found.st_mode & 0o077 or found.st_nlink != 1 or found.st_size > MAX_RECORD):
            log.info("a record of placeholders is not trusted, and left: %s", name)
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its server is alive
        now = os.stat(name, dir_fd=at, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (found.st_dev, found.st_ino):
            return False  # replaced by its server meanwhile (`Journal._compact`)
        text = os.read(fd, MAX_RECORD + 1).decode("ascii", "replace")
        writer, live, unsure = _read(text)
        if writer is None:
            if time.time() - found.st_mtime > MAKING:
                os.unlink(name, dir_fd=at)  # its server died making it: nothing in it
            return False
        pid, start, boot = writer
        if _identity(pid) == (start, boot):
            return False  # unlocked, but its server runs: not gone
        outcome: dict[str, list[str]] = {"removed": [], "gone": [], "left": []}
        for path in sorted(live, key=lambda path: (-path.count("/"), path)):
            if time.monotonic() > ends:
                return bool(outcome["removed"])  # the record stays, for the next server
            outcome[_remove(path, live[path])].append(path)
        os.unlink(name, dir_fd=at)
    finally:
        os.close(fd)
    if outcome["removed"]:
        log.info("removed %d placeholders server %d left when it was killed: %s",
                 len(outcome["removed"]), pid, " ".join(outcome["removed"]))
    left = [*outcome["left"], *sorted(unsure)]
    if left:
        log.info("left what server %d may have made and not removed (changed since, or not "
                 "seen made): %s", pid, " ".join(left))
    return bool(outcome["removed"])
