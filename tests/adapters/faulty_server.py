"""`execproto serve`, with one of the action handlers of the driver's rooms made to raise: a
stand-in for a bug, or the OS refusing, while an action is carried out.

    python tests/adapters/faulty_server.py MODULE:CLASS.METHOD serve --listen ... --adapter ...

(for example ``_processes._children:Children._spawn``: a module of execproto.adapters, a class
in it, the handler).
"""

from __future__ import annotations

import importlib
import sys

from execproto.adapters import cli


def _raise(*args: object) -> None:
    raise RuntimeError("injected")


if __name__ == "__main__":
    module, _, handler = sys.argv[1].partition(":")
    room, _, method = handler.partition(".")
    cls = getattr(importlib.import_module(f"execproto.adapters.{module}"), room)
    assert callable(getattr(cls, method)), f"{sys.argv[1]} names no handler"
    setattr(cls, method, _raise)
    sys.exit(cli.main(sys.argv[2:]))
