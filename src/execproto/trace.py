"""Traces: a core's inputs and outputs recorded as JSON lines, and fed again to a fresh core.

`Recorder` wraps a `ServerCore` and writes each call to a sink; `replay` feeds a trace to a new
core and reports the first step that differs; `readable` shows a recorded value as its line.
"""

from __future__ import annotations

from ._trace import Recorder, ReplayResult, readable, replay

__all__ = ["Recorder", "ReplayResult", "readable", "replay"]
