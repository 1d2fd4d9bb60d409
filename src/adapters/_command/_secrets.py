"""What of the server's own files every sandbox and fs call is denied (`Config.secrets`).

The files move: a Kubernetes Secret volume names each key by a link (``token ->
..data/token``, ``..data -> ..2026_12_04_...``), and an update writes a new timestamped
directory beside the old one and swaps ``..data``; certbot swaps a link to a new
``privkeyN.pem``; others rename a new file over the old. So the denied set is:

- each file as the operator named it. The adapter resolves every rule's path through its links
  at each spawn and each fs call, so the name denies the file it leads to *then*, whatever was
  swapped since, with no reload to wait for;
- each file it resolved to at start (an old key kept beside the new one is still a key);
- the directories that are the secrets' own, whole: the one holding each file as named, and the
  one each link on the way leads into, when that directory is dedicated (`_dedicated`). A
  rotation's new file appears in such a directory, so it is denied before it exists, to a
  sandbox already running too (whose mounts were made before it); a file renamed over a denied
  file's mount point would take that mount with it.

A link on the way is not denied as such: what it leads to is denied through the names, and
its own target can be a broad directory (``/var/run -> /run``) that sandboxes need.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._system import readlink

if TYPE_CHECKING:
    from pathlib import Path

VOLUME = "..data"  # the link a Kubernetes volume's atomic writer swaps at each update


def denied(secrets: Iterable[Path], beside: Iterable[Path] = ()) -> tuple[str, ...]:
    """The paths to deny for ``secrets`` (the token file, the TLS key, the trace); ``beside``
    are the server's other files (the certificate), which a directory may hold and still be
    the secrets' own."""
    named = [os.path.abspath(path) for path in secrets]
    own = {*named, *(os.path.abspath(path) for path in beside)}
    own |= {os.path.realpath(path) for path in own}
    found: dict[str, None] = {}  # a set, in the order met
    for path in named:
        found[path] = found[os.path.realpath(path)] = None
        for directory in [os.path.dirname(path), *_led_into(path)]:
            if _dedicated(directory, own):
                found[directory] = None
    return tuple(found)


def directories(secrets: Iterable[str]) -> list[str]:
    """Those of ``denied``'s paths that are directories, for the start-up log."""
    return [path for path in secrets if os.path.isdir(path) and not os.path.islink(path)]


def _led_into(path: str) -> list[str]:
    """The directory each link on the way to ``path`` leads into (real paths), in order."""
    from execproto.policy import PlantedLink, follow  # where there is a secret: few starts

    hops: list[tuple[str, str]] = []
    try:
        follow(path, readlink, hops=hops)
    except PlantedLink:
        pass  # a loop: the links before it still lead somewhere
    found = []
    for link, target in hops:
        try:
            led = posixpath.join(posixpath.dirname(link), posixpath.dirname(target))
            found.append(follow(led, readlink)[0])
        except PlantedLink:
            pass
    return found


def _dedicated(directory: str, own: set[str]) -> bool:
    """Whether ``directory`` is the secrets' own: a Kubernetes volume (it holds ``..data``:
    everything in it is the Secret's, and every update's directory appears in it), or one
    that holds the server's own files and nothing else (systemd's credentials, an
    /etc/execproto). Never `/`, nor a directory anyone may write (/tmp): those are shared."""
    try:
        if directory == "/" or os.stat(directory).st_mode & stat.S_IWOTH:
            return False
        if os.path.islink(os.path.join(directory, VOLUME)):
            return True
        with os.scandir(directory) as entries:
            return all(entry.path in own for entry in entries)
    except OSError:
        return False
