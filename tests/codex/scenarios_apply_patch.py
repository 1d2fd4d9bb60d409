"""`apply_patch` on the executor's PATH: a model that calls it from the shell in a way codex
does not take over (its input from a file, not a heredoc codex parses itself) runs the
executor's own program, which the reference's `codex-path` alias and execproto's directory
provide (`_codex_path`), in codex's workspace-write sandbox.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from .fake_model import say, shell
from .runner import Run

PATCH = """\
*** Begin Patch
*** Add File: piped.txt
+piped through the shell
*** Update File: notes.txt
@@
-old
+new
*** End Patch
"""


def _serves_apply_patch(run: Run) -> bool:
    """Whether this execproto's serve makes the directory (its --help says so)."""
    if run.server == "reference":
        return True
    shown = subprocess.run([sys.executable, "-m", "execproto.adapters", "serve", "--help"],
                           capture_output=True, text=True, timeout=60).stdout
    return "apply_patch" in shown


def piped(run: Run) -> dict[str, Any]:
    if not _serves_apply_patch(run):
        return {"skipped": "this serve does not put an apply_patch directory on PATH yet"}
    (run.workdir / "notes.txt").write_text("old\n")
    (run.workdir / "change.patch").write_text(PATCH)
    model = run.codex([[shell("found", "command -v apply_patch applypatch >/dev/null && "
                                       "echo both-found")],
                       [shell("piped", "apply_patch < change.patch; echo status=$?")],
                       [say("done")]])
    piped_file = run.workdir / "piped.txt"
    return {**run.facts(model),
            "notes": (run.workdir / "notes.txt").read_text(),
            "piped": piped_file.read_text() if piped_file.exists() else None}


SCENARIOS = {"apply_patch_piped": piped}
