"""`execproto serve`, with one of the driver's action handlers made to raise: a stand-in for a
bug, or the OS refusing, while an action is carried out.

    python tests/adapters/faulty_server.py HANDLER serve --listen ... --adapter ...
"""

from __future__ import annotations

import sys

from execproto.adapters import _driver, cli


def _raise(*args: object) -> None:
    raise RuntimeError("injected")


if __name__ == "__main__":
    setattr(_driver.Driver, sys.argv[1], _raise)
    sys.exit(cli.main(sys.argv[2:]))
