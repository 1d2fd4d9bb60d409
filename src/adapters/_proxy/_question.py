"""What the room asks the core about one destination: the core's own `Question`
(``execproto._netproxy``), named here so the room's modules share one import."""

from __future__ import annotations

from execproto.netproxy import Protocol, Question

__all__ = ["Protocol", "Question"]
