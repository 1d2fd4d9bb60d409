"""`execproto serve` with small process caps, which have no flag (an operator has no reason to
tune them), so that a test can fill them in a few seconds:

    python tests/adapters/capped_server.py MAX_PROCESSES MAX_SESSION_PROCESSES serve --listen ...
"""

from __future__ import annotations

import functools
import sys

from execproto import Config
from execproto.adapters import cli
from execproto.adapters._command import _serve

if __name__ == "__main__":
    caps = {"max_processes": int(sys.argv[1]), "max_session_processes": int(sys.argv[2])}
    _serve.Config = functools.partial(Config, **caps)  # type: ignore[misc]
    sys.exit(cli.main(sys.argv[3:]))
