"""`apply_patch` gives the reference's results byte for byte: every case of
apply_patch_corpus.py is run by the reference's ``apply_patch`` (its binary under that name,
which it acts on) and by ours (the program `serve`'s PATH directory holds), each in a fresh
directory, and the exit status, stdout, stderr and resulting tree must be the same.

The reference's results are also kept in apply_patch_reference.json, so that ours is held to
them where the reference is not installed; ``EXECPROTO_RECORD_APPLY_PATCH=1`` with the
reference writes that file again.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import REFERENCE, WHY_MISSING

from execproto.adapters._command import _codex_path

from .apply_patch_corpus import CASES, Case, Fifo, HardLink, Link, Mode

RECORDED = Path(__file__).with_name("apply_patch_reference.json")
RECORD = os.environ.get("EXECPROTO_RECORD_APPLY_PATCH") == "1"
TIMEOUT = 60


@pytest.fixture(scope="module")
def ours() -> Iterator[str]:
    directory = _codex_path.make()
    yield os.path.join(directory, "apply_patch")
    _codex_path.remove(directory)


@pytest.fixture(scope="module")
def reference() -> Iterator[str]:
    if REFERENCE is None:
        pytest.skip(WHY_MISSING)
    with tempfile.TemporaryDirectory() as bin_dir:
        # The reference's binary is apply_patch when run by either name.
        for name in ("apply_patch", "applypatch"):
            os.symlink(REFERENCE, os.path.join(bin_dir, name))
        yield os.path.join(bin_dir, "apply_patch")


def lay_out(root: Path, case: Case) -> Path:
    work = root / "work"
    work.mkdir(parents=True)
    for name, spec in case.files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if spec is None:
            path.mkdir(exist_ok=True)
        elif isinstance(spec, Link):
            path.symlink_to(spec.target)
        elif isinstance(spec, HardLink):
            os.link(work / spec.target, path)
        elif isinstance(spec, Fifo):
            os.mkfifo(path)
        elif isinstance(spec, Mode):
            path.write_bytes(spec.contents)
            path.chmod(spec.mode)
        else:
            path.write_bytes(spec.encode() if isinstance(spec, str) else spec)
    return work


def tree(root: Path) -> dict[str, Any]:
    """Everything under ``root``: kind, mode, links and contents."""
    found: dict[str, Any] = {}
    for where, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = os.path.join(where, name)
            info = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ["link", os.readlink(path)]
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ["dir", oct(info.st_mode & 0o7777)]
            elif stat.S_ISFIFO(info.st_mode):
                found[rel] = ["fifo"]
            else:
                data = Path(path).read_bytes()
                found[rel] = ["file", oct(info.st_mode & 0o7777), info.st_nlink,
                              data.decode("latin-1")]
    return found


def run(program: str, case: Case, root: Path) -> dict[str, Any]:
    """What ``program`` does with ``case`` in a fresh directory ``root``."""
    work = lay_out(root, case)

    def placed(text: str | bytes) -> bytes:
        data = text.encode() if isinstance(text, str) else text
        return data.replace(b"{ROOT}", str(root).encode())

    stdin = b""
    argv: list[str | bytes]
    if case.how == "arg":
        argv = [program, placed(case.patch)]
    elif case.how == "stdin":
        argv, stdin = [program], placed(case.patch)
    elif case.how == "shell" and case.script:
        argv = ["sh", "-c", case.script.encode(), b"sh", placed(case.patch)]
    elif case.how == "shell":
        argv = ["sh", "-c", b"apply_patch <<'EOF'\n" + placed(case.patch) + b"\nEOF\n"]
    else:
        argv, stdin = [program, *map(placed, case.argv)], placed(case.stdin)
    path = f"{os.path.dirname(program)}:/usr/bin:/bin"
    done = subprocess.run(argv, cwd=work, input=stdin, capture_output=True, timeout=TIMEOUT,
                          env={"PATH": path, "LANG": "C.UTF-8"}, umask=0o022)
    here = str(root).encode()
    return {
        "status": done.returncode,
        "stdout": done.stdout.replace(here, b"{ROOT}").decode("latin-1"),
        "stderr": done.stderr.replace(here, b"{ROOT}").decode("latin-1"),
        "tree": tree(root),
    }


def recorded() -> dict[str, Any]:
    return json.loads(RECORDED.read_text()) if RECORDED.exists() else {}


NAMES = [case.name for case in CASES]


def test_case_names_are_unique() -> None:
    assert len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("case", CASES, ids=NAMES)
def test_same_as_the_reference(case: Case, reference: str, ours: str, tmp_path: Path) -> None:
    expected = run(reference, case, tmp_path / "reference")
    assert run(ours, case, tmp_path / "ours") == expected


# Only where the reference is missing: where it is, it is compared with live, case by case.
@pytest.mark.parametrize("case", CASES if REFERENCE is None else [],
                         ids=NAMES if REFERENCE is None else [])
def test_same_as_recorded(case: Case, ours: str, tmp_path: Path) -> None:
    """The reference's results as recorded, for hosts without it."""
    results = recorded()
    if case.name not in results:
        pytest.skip(f"no recorded result for {case.name!r} (record with the reference: "
                    "EXECPROTO_RECORD_APPLY_PATCH=1)")
    assert run(ours, case, tmp_path / "ours") == results[case.name]


@pytest.mark.skipif(not RECORD, reason="records only with EXECPROTO_RECORD_APPLY_PATCH=1")
def test_record(reference: str, tmp_path: Path) -> None:
    results = {case.name: run(reference, case, tmp_path / f"case-{index}")
               for index, case in enumerate(CASES)}
    RECORDED.write_text(json.dumps(results, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
