"""The event set is written once (execproto.events); the core's handler table must cover it
exactly, so an event added there cannot go unhandled, nor a handler outlive its event."""

from __future__ import annotations

import subprocess
import sys

import pytest

from execproto import LocalProtocolError, ServerCore
from execproto._server import LATER
from execproto.events import EVENT_TYPES, ForwardConnected, FsCompleted, HttpFinished

# The modules of the events of the families made at their first need (files, forwarding, http).
LATER_EVENTS = {f"execproto{module}" for _, module in LATER.values()}


def test_the_core_handles_every_event_and_nothing_else() -> None:
    core = ServerCore()
    # A later family's handlers join the table at its first need (a call, or an event).
    later = {kind for kind in EVENT_TYPES if kind.__module__ in LATER_EVENTS}
    assert len(later) == 11
    assert set(core._event_handlers) == set(EVENT_TYPES) - later
    for family in LATER:
        core._later(family)
    assert set(core._event_handlers) == set(EVENT_TYPES)


def test_an_event_of_a_later_family_first_is_checked_as_ever() -> None:
    # A fresh core makes the family for the event, which names nothing the core issued.
    core = ServerCore()
    with pytest.raises(LocalProtocolError, match="forward stream 1 was never issued"):
        core.handle(ForwardConnected(stream=1), 0.0)
    core = ServerCore()
    with pytest.raises(LocalProtocolError, match="operation 1 was never issued"):
        core.handle(HttpFinished(op=1), 0.0)
    core = ServerCore()
    with pytest.raises(LocalProtocolError, match="operation 1 was never issued"):
        core.handle(FsCompleted(op=1), 0.0)


# The server's core, made and used for a handshake, loads nothing of the later families: not
# forwarding's, http's, nor the file calls' (their handlers, parsers, requests, events, actions).
HANDSHAKE = """
import sys
from execproto import ConnectionOpened, MessageReceived, ServerCore
core = ServerCore()
core.handle(ConnectionOpened(conn=1, session_id="s"), 0.0)
core.handle(MessageReceived(conn=1, data=b'{"id":1,"method":"initialize","params":'
                            b'{"clientName":"t"}}'), 0.0)
print(sorted(name for name in sys.modules if "forward" in name or "http" in name
             or name in ("execproto.fs", "execproto._fs_params", "execproto._watches")
             or name.startswith("execproto._fs_")))
"""


def test_a_core_that_never_forwards_fetches_nor_touches_files_loads_none_of_them() -> None:
    done = subprocess.run([sys.executable, "-c", HANDSHAKE], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
