"""The two kinds of failure the core knows about.

A *peer's* mistake (bad JSON, a wrong parameter, a call out of order) is never an exception that
leaves ``handle()``: it becomes an error response, built from `RpcError`. An *adapter's* mistake
(an event that cannot happen, such as output after that stream's EOF) is a bug in the code driving
the core, and raises `LocalProtocolError`, as h11 does for its caller's mistakes.
"""

from __future__ import annotations

from typing import Any

import attrs

# JSON-RPC error codes used on the wire (see docs/protocol.md), exported by execproto so that
# neither side spells a bare number.
#
# JSON-RPC's own. The server never sends PARSE_ERROR: like the reference, it answers a frame that
# is not a message with INVALID_REQUEST (and id -1); the name is here for clients of other servers.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600  # also: a call out of order, a refusal (not a file, outside the roots)
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602  # also: a spawn the backend refused, a sandbox it cannot enforce
INTERNAL_ERROR = -32603  # also: an OS error (its own words), a spawn that failed
# The exec-server's own, in the range JSON-RPC leaves to servers.
NOT_FOUND = -32004  # a path that does not exist, or an unknown fs handle
SESSION_ATTACHED = -32010  # the session to resume is still attached to another connection


class UnsendableText(ValueError):
    """A call's text the protocol cannot carry: JSON text is UTF-8, and a string holding a lone
    surrogate (an undecodable byte of argv or the environment, as Python's os module gives
    it) would reach the server as invalid JSON, which it answers with no id to match. ``where``
    names the field: ``argv[1]``, ``env['X']``."""

    def __init__(self, where: str, value: str) -> None:
        super().__init__(f"{where} is not UTF-8 text ({value!r}); the protocol carries "
                         "UTF-8 only")
        self.where = where


class LocalProtocolError(Exception):
    """The adapter fed the core an event that is impossible in the current state."""


@attrs.frozen
class RpcError(Exception):
    """An error answer to a request: the JSON-RPC ``error`` object.

    It is an exception so that validation code deep in a parser can abandon the request at once;
    `ServerCore.handle` catches it and turns it into a response.
    """

    code: int
    message: str
    data: Any = None

    def to_json(self) -> dict[str, Any]:
        """The ``error`` member of a response: ``code``, ``message``, and ``data`` if set."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def invalid_request(message: str) -> RpcError:
    return RpcError(INVALID_REQUEST, message)


def invalid_params(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, message)


def internal_error(message: str, data: Any = None) -> RpcError:
    return RpcError(INTERNAL_ERROR, message, data)
