"""The two kinds of failure the core knows about.

A *peer's* mistake (bad JSON, a wrong parameter, a call out of order) is never an exception that
leaves ``handle()``: it becomes an error response, built from `RpcError`. An *adapter's* mistake
(an event that cannot happen, such as output after that stream's EOF) is a bug in the code driving
the core, and raises `LocalProtocolError`, as h11 does for its caller's mistakes.
"""

from __future__ import annotations

from typing import Any

import attrs

# JSON-RPC error codes used on the wire (see docs/protocol.md).
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
NOT_FOUND = -32004
SESSION_ATTACHED = -32010


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
