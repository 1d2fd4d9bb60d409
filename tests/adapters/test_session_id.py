"""A connection's session id: a random (version 4) UUID in its usual text, as `uuid.uuid4()`
writes it, made without importing `uuid` at the server's start."""

from __future__ import annotations

import uuid

from execproto.adapters._wire._peer import _uuid4


def test_session_ids_are_version_4_uuids_in_their_usual_text() -> None:
    seen = set()
    for _ in range(200):
        text = _uuid4()
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        seen.add(text)
    assert len(seen) == 200
