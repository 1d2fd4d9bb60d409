"""The event set is written once (execproto.events); the core's handler table must cover it
exactly, so an event added there cannot go unhandled, nor a handler outlive its event."""

from __future__ import annotations

from execproto import ServerCore
from execproto.events import EVENT_TYPES


def test_the_core_handles_every_event_and_nothing_else() -> None:
    assert set(ServerCore()._event_handlers) == set(EVENT_TYPES)
