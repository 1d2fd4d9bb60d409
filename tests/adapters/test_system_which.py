"""What a start finds without importing shutil, found as shutil finds it: `_system.which` gives
`shutil.which`'s answers for every kind of name and PATH, and the command line's width is
`shutil.get_terminal_size`'s."""

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


@pytest.mark.parametrize("columns", ["57", "0", "-3", "wide", None])
def test_the_parsers_width_is_shutils(columns: str | None,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """argparse's formatters get the width `shutil.get_terminal_size` would give them (the
    command line finds it itself, so as not to import shutil at a start)."""
    from execproto.adapters import cli

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli._columns() == shutil.get_terminal_size().columns
