"""The placeholder directories sandboxes make on the host, and where one can be made.

A protected path (a workspace's `.git`, `.codex`) that is missing where a sandbox may write
gets an empty read-only directory mounted there for the sandbox's life, so that the command
cannot create it (the next command, and the user's client, would trust what it put there).
The stage makes the directory on the host (`_stage.Stage.placeholder`); `_bwrap.Sandbox`
plans it; this module says whether a path is reachable and whether a placeholder is needed
there (`reach`, `can_make`), and keeps count of the placeholders live sandboxes use, so that
each is removed once the last of them is gone (`Placeholders`).
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import Counter
from collections.abc import Iterable

from ._posix import remove_empty_directory


def reach(path: str) -> str:
    """Whether ``path`` is "there", "missing", or "unreachable": out of this server's reach,
    so of its sandboxes', which run as its user without capabilities: nothing to show or hide
    there, and no placeholder could be made. Only where the directory that refuses the search
    is another user's: one of the server's own a sandbox could open up (chmod) and then reach
    the path, so that one is "there", and its start fails rather than leave the rule out."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except PermissionError:
        return "there" if _blocked_by_own(path) else "unreachable"
    return "there"


def can_make(directory: str) -> bool:
    """Whether a sandbox might make an entry in ``directory``, where a missing protected path
    would go: if not, no placeholder is needed there, nor could one be made (the server is
    not root, and the directory is another user's that its user may not write: `/etc` for a
    server run as nobody). A sandbox runs as the server's user, with no capability over the
    host's inodes; it cannot open such a directory up (chmod is the owner's), nor put another
    in its place: renaming it takes writing its parent, and a parent the sandbox may write
    has the directories between it and the protected path pinned (`_pin_between`). Only the
    server's user's own directories could be opened up, so a placeholder there is made as
    always (the stage may, in a user namespace of its own: whatever the mode), and if it
    cannot be, the start fails. Not a bind or a cover: what is there is shown or hidden
    whoever may write beside it."""
    if os.geteuid() == 0:
        return True
    try:
        return (os.stat(directory).st_uid == os.geteuid() or
                os.access(directory, os.W_OK | os.X_OK, effective_ids=True))
    except OSError:
        return True  # the stage finds out, and fails the start if it must


def _blocked_by_own(path: str) -> bool:
    """Whether the first directory on the way to ``path`` that refuses its search is owned by
    the server's user."""
    here = "/"
    for name in path.strip("/").split("/"):
        inner = os.path.join(here, name)
        try:
            os.lstat(inner)
        except PermissionError:
            return os.lstat(here).st_uid == os.geteuid()
        except OSError:
            return False
        here = inner
    return False


class Placeholders:
    """The placeholder directories sandboxes made on the host, with how many live sandboxes
    mount on or beneath each: one set for the backend, shared by every sandbox, whose starts
    are prepared on several workers at once and whose finalizes run meanwhile.

    Why this is safe without preparing one sandbox at a time. A placeholder is removed only in
    `release`, under the lock, once no sandbox counts it. A sandbox looks at the file system
    without the lock (the costly part: resolving, the plan), and what it saw can be stale in
    one way that matters: a path it saw there (to bind, cover or pin) was a placeholder that
    another sandbox's finalize removed since; its stage would skip that mount as vanished, and
    a missing `.git` the command could create would be the result. So `take`, under the lock,
    counts every placeholder at or above the sandbox's rules (its pins are their parents),
    the ones it will make too: none of them can be removed from then on until its own
    `release`. And if any was removed since the sandbox began looking (`removals`, counted
    after the removal), it checks that every path it saw is still there, else the plan is
    made again. A path it saw missing is harmless stale: its stage makes it if still missing
    and takes one made meanwhile. So the lock is held for counting only, never while a policy
    is resolved or a pattern expanded.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uses: Counter[str] = Counter()
        self.removals = 0  # read without the lock: an int, and only compared

    def take(self, paths: list[str], made: set[str], looked: list[str], seen: int
             ) -> list[str] | None:
        """Count the placeholders at or above ``paths`` (a sandbox's rules) and those it
        ``made``, and return them, deepest first: the sandbox's uses. None (nothing counted)
        if one was removed since ``seen`` (`removals` when it began looking) and a path it
        ``looked`` at (to bind, cover or pin) is gone."""
        ordered = sorted(paths)
        with self._lock:
            if self.removals != seen and not all(map(os.path.lexists, looked)):
                return None
            used = [place for place in (*self._uses, *(made - self._uses.keys()))
                    if _at_or_above(place, ordered)]
            self._uses.update(used)
        return sorted(used, key=lambda place: (-place.count("/"), place))

    def release(self, uses: Iterable[str]) -> None:
        """A sandbox is gone (its pid namespace died with it): remove the placeholders no
        other one still uses. Deepest first; a directory someone has since put something in
        stays."""
        with self._lock:
            removed = False
            for path in uses:
                self._uses[path] -= 1
                if self._uses[path] > 0:
                    continue
                del self._uses[path]
                remove_empty_directory(path)
                removed = True
            if removed:  # after the removal: a sandbox that read the old count looked before
                self.removals += 1

    def __len__(self) -> int:
        return len(self._uses)


def _at_or_above(place: str, ordered: list[str]) -> bool:
    """Whether some path of the sorted ``ordered`` is ``place`` or lies beneath it."""
    index = bisect.bisect_left(ordered, place)
    if index < len(ordered) and ordered[index] == place:
        return True
    top = place.rstrip("/") + "/"
    index = bisect.bisect_left(ordered, top)
    return index < len(ordered) and ordered[index].startswith(top)
