"""Build a commit's execproto as deployed, to measure it beside another with bench/compare.py.

    .venv/bin/python bench/at_commit.py COMMIT [DIR]    # prints DIR/deploy/venv/bin/python

The commit's sources (src, pyproject.toml, README.md, LICENSE; read with ``git archive``, so the
work tree and anything uncommitted in it are left alone) are built as a wheel and installed in
a virtual environment of their own under DIR (default: a new directory in the system's temporary
one), as bench/cold_start.py deploys this checkout. A change is judged by runs of the commits
before and after it taking turns, each through the same bench:

    before=$(.venv/bin/python bench/at_commit.py 1ef79c5)
    after=$(.venv/bin/python bench/at_commit.py HEAD)
    for i in 1 2 3; do
        .venv/bin/python bench/compare.py --python "$after" --json after-$i.json
        .venv/bin/python bench/compare.py --python "$before" --json before-$i.json
    done
    .venv/bin/python bench/compare.py --table --from after-*.json    # and before-*.json
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_start import BUILT_FROM, ROOT, deployed  # noqa: E402


def build(commit: str, into: Path) -> Path:
    """The python of a venv in ``into`` with ``commit``'s execproto installed."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, *BUILT_FROM],
                             capture_output=True, check=True).stdout
    checkout = into / "checkout"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(checkout, filter="data")
    return deployed(into / "deploy", root=checkout).with_name("python")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit")
    parser.add_argument("dir", nargs="?", type=Path, help="where to build (a new directory)")
    args = parser.parse_args()
    into = args.dir or Path(tempfile.mkdtemp(prefix=f"execproto-{args.commit}-"))
    print(build(args.commit, into))


if __name__ == "__main__":
    main()
