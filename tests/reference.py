"""Where the reference, `codex` 0.171.0, is installed, if anywhere.

Looked for in order: $EXECPROTO_REFERENCE (a codex binary), the project's cache (where `make
test` installs it with npm), /tmp/ref (an older manual install), then `codex` on PATH. Tests that
need it skip with `WHY_MISSING` when `REFERENCE` is None.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


class Stdio:
    """The reference's exec-server over stdio: one request at a time, and its answer (it exits
    at end of input without answering what it still had)."""

    def __init__(self, server: subprocess.Popen[str]) -> None:
        assert server.stdin is not None and server.stdout is not None
        self._stdin, self._stdout = server.stdin, server.stdout

    def call(self, msg_id: int, method: str, params: object) -> dict[str, Any]:
        self.notify(method, params, msg_id)
        for line in self._stdout:
            message = json.loads(line)
            if message.get("id") == msg_id:
                return dict(message)
        raise AssertionError(f"the reference ended without answering {method}")

    def notify(self, method: str, params: object, msg_id: int | None = None) -> None:
        message = {"method": method, "params": params}
        self._stdin.write(json.dumps(message if msg_id is None else {"id": msg_id, **message})
                          + "\n")
        self._stdin.flush()


@contextlib.contextmanager
def over_stdio(where: Path) -> Iterator[Stdio]:
    """The reference serving stdio in ``where``, with a home of its own there; killed on
    leaving, or after 60 s if it stops answering."""
    assert REFERENCE is not None
    home = where / "home"
    (home / ".codex").mkdir(parents=True)
    env = dict(os.environ, HOME=str(home), CODEX_HOME=str(home / ".codex"))
    server = subprocess.Popen([REFERENCE, "exec-server", "--listen", "stdio"], cwd=where,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env)
    watchdog = threading.Timer(60, server.kill)
    watchdog.start()
    try:
        yield Stdio(server)
    finally:
        watchdog.cancel()
        server.kill()
        server.wait()
