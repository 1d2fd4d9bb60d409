"""JSON-RPC messages as the core reads them, for an adapter that must look at one before the
core does: `parse` gives an `Incoming` request or notification (or says it is malformed, or a
client's response), weighing it as the core will."""

from __future__ import annotations

from ._jsonrpc import ClientResponse, Incoming, Malformed, parse

__all__ = ["ClientResponse", "Incoming", "Malformed", "parse"]
