"""`execproto serve` with a core that raises on `environment/status`: a stand-in for a bug in
the core itself, to see the server stop on it cleanly.

    python tests/adapters/core_fault_server.py serve --listen ... --adapter ...
"""

from __future__ import annotations

import sys

from execproto import ServerCore
from execproto.adapters import cli


def _raise(*args: object) -> None:
    raise RuntimeError("injected core failure")


if __name__ == "__main__":
    ServerCore._environment_status = _raise  # type: ignore[method-assign,assignment]
    sys.exit(cli.main(sys.argv[1:]))
