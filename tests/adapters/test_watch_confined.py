"""fs/watchMissing under --fs-root: a watch is no oracle for what exists outside the roots.

Whether a watch is taken (``watching``) says whether its missing paths are absent and its
present one there, so a watch on a path outside, or through a symlink leading outside, used to
tell the client what exists where every other fs call refuses to look."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, uri
from .wsclient import Client

OUTSIDE = "path `{}` is outside the allowed roots"


@pytest.fixture
def jail(adapter: str, tmp_path: Path) -> Iterator[tuple[Client, Path, Path]]:
    """A server confined to ``root``; ``outside`` beside it holds a file, ``there``, and
    ``root/link`` leads to ``outside``."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "there").write_bytes(b"")
    (root / "link").symlink_to(outside)
    server = Server(adapter, "--fs-root", str(root))
    yield server.client(), root, outside
    log = server.stop()
    assert "Traceback" not in log, log


def watch(client: Client, watch_id: int, missing: list[Path], present: Path | None = None,
          ) -> dict[str, object]:
    params = {"watchId": watch_id, "missing": [uri(path) for path in missing],
              "present": None if present is None else uri(present)}
    return client.call("fs/watchMissing", params)


def test_a_path_outside_the_roots_is_refused(jail: tuple[Client, Path, Path]) -> None:
    client, root, outside = jail
    for n, (missing, present) in enumerate([
        ([outside / "there"], None),  # there: would answer watching false
        ([outside / "absent"], None),  # absent: would answer watching true
        ([root / "absent"], outside / "there"),
        ([root / "absent", root / ".." / "outside" / "there"], None),
    ]):
        reply = watch(client, n + 1, missing, present)
        assert reply["error"]["code"] == -32600, reply  # type: ignore[index]
        assert "is outside the allowed roots" in reply["error"]["message"], reply  # type: ignore[index]


def test_a_symlink_leading_outside_shows_nothing_there(jail: tuple[Client, Path, Path]) -> None:
    client, root, _ = jail
    # root/link/there exists on disk, but not for this client: it is missing to the watch...
    assert watch(client, 1, [root / "link" / "there"])["result"] == {"watching": True}
    # ... and is no present path either, exactly as an absent one would be.
    for n, present in enumerate([root / "link" / "there", root / "link" / "absent"]):
        reply = watch(client, n + 2, [root / "absent"], present)
        assert reply["result"] == {"watching": False}, reply


def test_a_watch_inside_the_roots_still_fires(jail: tuple[Client, Path, Path]) -> None:
    client, root, _ = jail
    assert watch(client, 1, [root / "new" / "deeper"])["result"] == {"watching": True}
    (root / "new").mkdir()
    changed = client.notification(lambda n: n["method"] == "fs/missingChanged")
    assert changed["params"] == {"watchId": 1}
