"""`_system.which` gives `shutil.which`'s answers (a start finds programs with it, so as not to
import shutil): the same file, or None, for every kind of name and PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from execproto.adapters._system import which


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name, mode in (("a/tool", 0o755), ("b/tool", 0o755), ("a/plain", 0o644),
                       ("b/plain", 0o755)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(mode)
    (tmp_path / "a" / "dir").mkdir()  # a directory with a program's name is no program
    (tmp_path / "b" / "dir").write_text("#!/bin/sh\n")
    (tmp_path / "b" / "dir").chmod(0o755)
    return tmp_path


def test_which_answers_as_shutil(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = str(tree / "a"), str(tree / "b")
    paths = [f"{a}:{b}", f"{b}:{a}", f"{a}:{a}:{b}", f"{b}", "", f":{a}", f"{tree}/none:{b}",
             None]
    names = ["tool", "plain", "dir", "missing", f"{a}/tool", f"{a}/plain", f"{a}/dir", "a/tool"]
    monkeypatch.chdir(tree)  # a relative name with a slash, and PATH's empty entry, mean here
    monkeypatch.setenv("PATH", f"{b}:/usr/bin:/bin")
    if os.geteuid() == 0:  # root may run any file with an execute bit: still the same answers
        (tree / "a" / "plain").chmod(0o744)
    for path in paths:
        for name in names:
            assert which(name, path) == shutil.which(name, path=path), (name, path)
    monkeypatch.delenv("PATH")
    assert which("sh") == shutil.which("sh")
