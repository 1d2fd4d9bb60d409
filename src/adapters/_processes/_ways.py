"""The ways to the server's own files, for a sandbox's plan: every link and directory met
resolving the names the server holds (`Ways`), kept from one start to the next while nothing
on them changed (`Remembered`), and two caches of one start's looks at the file system
(`Unlinked`, `Cached`).

Apart from `_bwrap`, which plans the mounts: this is how the plan learns what lies on the way,
cheaply, and why a sandbox cannot make what it learned stale (`Remembered`'s docstring).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import BinaryIO

from execproto.policy import PathRule, PlantedLink

from ._refusals import CannotEnforce

# Links followed resolving one held name (`Ways`) before it is given up as a loop (Linux's).
MAX_LINKS = 40


class Unlinked:
    """Whether a path is its real path (``os.path.realpath(path) == path``: absolute, normal,
    and no symlink on the way), each directory looked at once in a start: the server's own
    files (`Policy.caps`), a hundred of them in a few directories, were 2 ms a start."""

    def __init__(self) -> None:
        self._directories = {"/": True}

    def __call__(self, path: str) -> bool:
        if not path.startswith("/") or path.startswith("//") or os.path.normpath(path) != path:
            return os.path.realpath(path) == path
        return self._unlinked(path)

    def _unlinked(self, path: str) -> bool:
        parent = os.path.dirname(path)
        through = self._directories.get(parent)
        if through is None:
            through = self._directories[parent] = self._unlinked(parent)
        # A link is the rare case: realpath says (a loop, say, it leaves as it is).
        return through and (not os.path.islink(path) or os.path.realpath(path) == path)


class Cached:
    """A readlink asked once a path in a start: the policy is resolved three times (`crossing`,
    `pinned`, `_ways`), each through the same parents, and one snapshot of the links is what
    the plan is made from (the stage checks each link it relies on is still so)."""

    def __init__(self, readlink: Callable[[str], str | None]) -> None:
        self._readlink = readlink
        self._seen: dict[str, str | None] = {}

    def __call__(self, path: str) -> str | None:
        try:
            return self._seen[path]
        except KeyError:
            found = self._seen[path] = self._readlink(path)
            return found


class Ways:
    """Every entry met resolving the held names (the policy's caps), as the kernel resolves
    them: a link with its target, anything else with None (a directory, or the held file
    itself), in the order met. Renamed or replaced, any of them would lead the name
    elsewhere: `/lib64`, a link in `/` on the way to the loader PT_INTERP names, turned to a
    directory of the sandbox's would have the next program the server execs (bubblewrap
    itself) load the sandbox's loader. So those the sandbox may write beside are pinned
    (`_bwrap.Sandbox._pin_ways`). Each path is resolved once in a start: the hundred held names lie
    in a few directories."""

    def __init__(self, readlink: Callable[[str], str | None]) -> None:
        self._readlink = readlink
        self._real = {"/": "/"}
        self.met: dict[str, str | None] = {}
        self.directories: set[str] = set()  # those of ``met`` looked into
        self._links = 0

    def real(self, path: str) -> str | None:
        """``path`` (absolute and normal, as a rule's) resolved, or None for a loop: the name
        leads nowhere the server could load (the entries met on the way are kept)."""
        self._links = 0
        try:
            return self._resolved(path)
        except PlantedLink:
            return None
        except RecursionError:  # links leading ever deeper: nothing a host has
            raise CannotEnforce(f"{path} is too deep to resolve") from None

    def followed(self, caps: Sequence[PathRule]) -> list[PathRule]:
        """Each of ``caps`` at its real path, those that lead nowhere left out: what
        `pinned` would walk for them again (`follow_caps`)."""
        found = []
        for cap in caps:
            real = self.real(cap.path)
            if real is not None:
                found.append(PathRule(path=real, access=cap.access))
        return found

    def _resolved(self, path: str) -> str:
        real = self._real.get(path)
        if real is None:
            parent, name = path.rsplit("/", 1)
            real = self._real[path] = self._entry(self._resolved(parent or "/"), name)
        return real

    def _entry(self, directory: str, name: str) -> str:
        if directory != "/":
            self.directories.add(directory)
        here = ("" if directory == "/" else directory) + "/" + name
        target = self.met[here] = self._readlink(here)
        if target is None:
            return here
        self._links += 1
        if self._links > MAX_LINKS:
            raise PlantedLink(f"{here}: too many levels of symbolic links")
        real = "/" if target.startswith("/") else directory
        for part in target.split("/"):
            if part in ("", "."):
                continue
            real = (os.path.dirname(real) if part == ".." else
                    self._resolved(("" if real == "/" else real) + "/" + part))
        return real

    def copy(self, readlink: Callable[[str], str | None]) -> Ways:
        """The same ways, for another start (reading with its ``readlink`` what it asks
        beyond them), sharing nothing it may change."""
        other = Ways(readlink)
        other._real, other.met = dict(self._real), dict(self.met)
        other.directories = set(self.directories)
        return other


class Remembered:
    """The ways to the server's own files (`Ways` over a policy's caps, the same hundred
    paths at every start), kept from one start to the next while nothing on them changed:
    walking them was a third of a workspace-write start's preparation.

    What a walk gives depends only on what each entry it read is (a link and its target, or
    not a link), so the ways hold while each of those entries is as it was. Each directory
    the walk read entries from is stamped before they are read (its device, inode, and
    modification and change times to the nanosecond), and a later start re-reads the stamp
    only: an entry made, removed, renamed or replaced in a directory changes its times, a
    link cannot be changed in place, and a sandbox cannot set the times back (setting the
    modification time sets the change time to now). A directory whose stamp changed, or was
    taken within `TRUSTED_AFTER` of the directory's last change (the kernel's clock for file
    times is coarse: two changes a tick apart could look as one), has its entries read again
    instead (`/tmp` is busy, and the server may be beneath it); any that changed, or any
    change in the server's mount table (a mount over a directory changes no time), and the
    ways are walked anew. So no change a sandbox makes on those ways goes unseen."""

    TRUSTED_AFTER = 1.0  # seconds

    def __init__(self) -> None:
        self._lock = threading.Lock()  # starts are prepared on several workers at once
        # By the caps walked to (a few lists: a read-only profile's leaves the read caps
        # out), the last used last: the ways, and by each directory read, its stamp, whether
        # the stamp may be trusted, and the entries read there.
        self._kept: dict[tuple[str, ...], tuple[Ways, Stamps]] = {}
        self._mounts: select.poll | None = None  # the server's mount table, polled
        self._mounts_file: BinaryIO | None = None
        self.walks = 0  # how many times the ways were walked (for tests)

    def ways(self, caps: tuple[str, ...], readlink: Callable[[str], str | None]) -> Ways:
        """The ways to ``caps`` for a start that reads with ``readlink``: remembered if
        nothing on them changed, else walked now (and remembered)."""
        with self._lock:
            if self._mounted():  # first: a walk made now is seen to by the next poll
                self._kept.clear()
            kept = self._kept.pop(caps, None)
            if kept is not None and self._unchanged(*kept, readlink):
                self._kept[caps] = kept
                return kept[0].copy(readlink)
        stamps: dict[str, Stamp | None] = {}

        def stamping(path: str) -> str | None:
            directory = os.path.dirname(path)
            if directory not in stamps:
                stamps[directory] = _stamp(directory)
            return readlink(path)

        since = time.time_ns() - int(self.TRUSTED_AFTER * 1e9)
        ways = Ways(stamping)
        for path in caps:
            ways.real(path)
        self.walks += 1
        entries: dict[str, list[str]] = {}
        for path in ways.met:
            entries.setdefault(os.path.dirname(path), []).append(path)
        ways._readlink = readlink
        with self._lock:
            self._kept[caps] = (ways.copy(readlink), {
                directory: (stamp, _trusted(stamp, since), entries.get(directory, []))
                for directory, stamp in stamps.items()})
            while len(self._kept) > KEPT_WAYS:
                del self._kept[next(iter(self._kept))]
        return ways

    def _unchanged(self, ways: Ways, stamps: Stamps,
                   readlink: Callable[[str], str | None]) -> bool:
        """Whether every entry the remembered walk read is as it was; the stamps renewed."""
        since = time.time_ns() - int(self.TRUSTED_AFTER * 1e9)
        for directory, (stamp, trusted, entries) in stamps.items():
            now = _stamp(directory)
            if trusted and now == stamp:
                continue
            if any(readlink(path) != ways.met[path] for path in entries):
                return False
            stamps[directory] = (now, _trusted(now, since), entries)
        return True

    def _mounted(self) -> bool:
        """Whether the server's mount table changed since the last call (the first: yes)."""
        if self._mounts is None:
            try:
                self._mounts_file = open("/proc/self/mounts", "rb")  # noqa: SIM115 - polled
            except OSError:
                return True
            self._mounts = select.poll()
            self._mounts.register(self._mounts_file, select.POLLPRI)
            return True
        return any(event & (select.POLLPRI | select.POLLERR)
                   for _, event in self._mounts.poll(0))


# A directory's device, inode, and modification and change times.
Stamp = tuple[int, int, int, int]
# By directory: its stamp, whether it may be trusted, and the entries the walk read there.
Stamps = dict[str, tuple[Stamp | None, bool, list[str]]]
# Lists of caps whose ways `Remembered` keeps at once.
KEPT_WAYS = 4


def _stamp(directory: str) -> Stamp | None:
    try:
        found = os.lstat(directory)
    except OSError:
        return None
    return found.st_dev, found.st_ino, found.st_mtime_ns, found.st_ctime_ns


def _trusted(stamp: Stamp | None, since: int) -> bool:
    """Whether ``stamp`` was taken well after its directory last changed (before ``since``)."""
    return stamp is not None and max(stamp[2:]) < since


REMEMBERED = Remembered()
