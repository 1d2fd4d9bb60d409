"""`_bwrap._Unlinked`, the cached "is this its real path" of a sandbox's rules and caps, says
what `os.path.realpath(path) == path` says, whatever lies on the way: links to directories
and files, dangling links, loops, missing parts, a file where a directory was expected."""

from __future__ import annotations

import os
from pathlib import Path

from execproto.adapters._processes._bwrap import _Unlinked


def test_it_agrees_with_realpath_everywhere(tmp_path: Path) -> None:
    real = tmp_path.resolve()
    (real / "d" / "e").mkdir(parents=True)
    (real / "d" / "e" / "f").write_text("")
    (real / "file").write_text("")
    (real / "to-d").symlink_to(real / "d")
    (real / "d" / "to-file").symlink_to("../file")
    (real / "dangling").symlink_to(real / "nowhere")
    (real / "loop-a").symlink_to(real / "loop-b")
    (real / "loop-b").symlink_to(real / "loop-a")
    names = ["d", "d/e", "d/e/f", "file", "file/beneath", "to-d", "to-d/e", "to-d/e/f",
             "d/to-file", "dangling", "dangling/x", "loop-a", "loop-a/x", "missing",
             "missing/deeper", "d/../d", "d/./e", "d//e", "d/e/"]
    paths = ["/", "//", str(real), *(f"{real}/{name}" for name in names), "relative/path"]
    unlinked = _Unlinked()
    for _ in range(2):  # and again, from what it remembered
        for path in paths:
            assert unlinked(path) == (os.path.realpath(path) == path), path
