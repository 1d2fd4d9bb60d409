"""Where the reference, `codex` 0.171.0, is installed, if anywhere.

Looked for in order: $EXECPROTO_REFERENCE (a codex binary), the project's cache (where `make
test` installs it with npm), /tmp/ref (an older manual install), then `codex` on PATH. Tests that
need it skip with `WHY_MISSING` when `REFERENCE` is None.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

VERSION = "0.171.0"
CACHE = Path.home() / ".cache" / "execproto" / f"codex-{VERSION}"
# npm installs a JavaScript launcher and, beside it, the native binary it runs: use the binary.
NATIVE = "node_modules/@openai/codex-linux-x64/vendor/*/bin/codex"


def _candidates() -> list[str]:
    found = [os.environ.get("EXECPROTO_REFERENCE", "")]
    found += sorted(glob.glob(str(CACHE / NATIVE)))
    found += sorted(glob.glob(f"/tmp/ref/{NATIVE}"))
    found.append(shutil.which("codex") or "")
    return [path for path in found if path]


def _find() -> tuple[str | None, str]:
    tried = []
    for path in _candidates():
        try:
            said = subprocess.run([path, "--version"], capture_output=True, text=True,
                                  timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as error:
            said = str(error)
        version = said.strip().split("\n")[0]  # "codex-cli 0.171.0"
        if version.split()[-1:] == [VERSION]:
            return path, ""
        tried.append(f"{path} ({version or 'no version'})")
    if tried:
        return None, f"no codex {VERSION} found; tried {', '.join(tried)}"
    return None, (f"codex {VERSION} not installed: run `make reference` (needs npm) or set "
                  "EXECPROTO_REFERENCE to a codex binary")


REFERENCE, WHY_MISSING = _find()
