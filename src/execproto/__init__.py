"""execproto: the Codex exec-server protocol as a pure, I/O-free state machine.

Feed `ServerCore.handle` events and a time; carry out the actions it returns. The events are
in `execproto.events` (each an `Event`), the actions in `execproto.actions` (each an `Action`);
everything named in ``__all__`` is also importable from here. `ClientCore` is the client side,
in the same style: its events are in `execproto.client_events` (each a `ClientEvent`), apart
from the server's. Adapters that bind them to real processes and websockets live in
`execproto.adapters`.

Error codes: `RpcError.code` and `Failure.code` are JSON-RPC codes, named here
(`INVALID_REQUEST`, `INVALID_PARAMS`, `INTERNAL_ERROR`, `NOT_FOUND`, `SESSION_ATTACHED`, ...),
or `CONNECTION_LOST` on the client side.

Nothing is imported until it is first used (PEP 562): a server loads the server side, a client
the client side, and ``import execproto`` alone costs next to nothing.
"""

from __future__ import annotations

# typing.TYPE_CHECKING's run-time value, without importing typing (~2.5 ms): this module runs
# before `python -m execproto` can take a Ctrl-C quietly (see adapters/_entry.py), so the less
# it does, the smaller that window.
TYPE_CHECKING = False

if TYPE_CHECKING:  # what mypy and editors see; at run time, `__getattr__` below
    from typing import Any

    from ._clientside._client import ClientCore as ClientCore
    from ._clientside._client_tracks import ClientState as ClientState
    from ._config import Config as Config
    from ._config import Host as Host
    from ._env import EnvPolicy as EnvPolicy
    from ._env import child_environment as child_environment
    from ._errors import INTERNAL_ERROR as INTERNAL_ERROR
    from ._errors import INVALID_PARAMS as INVALID_PARAMS
    from ._errors import INVALID_REQUEST as INVALID_REQUEST
    from ._errors import METHOD_NOT_FOUND as METHOD_NOT_FOUND
    from ._errors import NOT_FOUND as NOT_FOUND
    from ._errors import PARSE_ERROR as PARSE_ERROR
    from ._errors import SESSION_ATTACHED as SESSION_ATTACHED
    from ._errors import LocalProtocolError as LocalProtocolError
    from ._errors import RpcError as RpcError
    from ._errors import UnsendableText as UnsendableText
    from ._paths import path_from_uri as path_from_uri
    from ._paths import uri_from_path as uri_from_path
    from ._policy import PathRule as PathRule
    from ._policy import Policy as Policy
    from ._server import ServerCore as ServerCore
    from ._session import Greeting as Greeting
    from ._trace import Recorder as Recorder
    from ._trace import ReplayResult as ReplayResult
    from ._trace import replay as replay
    from .actions import Action as Action
    from .actions import AnswerProxy as AnswerProxy
    from .actions import CancelHttp as CancelHttp
    from .actions import CloseConnection as CloseConnection
    from .actions import CloseStdin as CloseStdin
    from .actions import EndSession as EndSession
    from .actions import Finalize as Finalize
    from .actions import FsRequest as FsRequest
    from .actions import HttpRequest as HttpRequest
    from .actions import PauseOutput as PauseOutput
    from .actions import ResizeTerminal as ResizeTerminal
    from .actions import ResumeOutput as ResumeOutput
    from .actions import RunFs as RunFs
    from .actions import RunHttp as RunHttp
    from .actions import Send as Send
    from .actions import Signal as Signal
    from .actions import Spawn as Spawn
    from .actions import SpawnSpec as SpawnSpec
    from .actions import Unwatch as Unwatch
    from .actions import WatchMissing as WatchMissing
    from .actions import WriteStdin as WriteStdin
    from .client_events import CONNECTION_LOST as CONNECTION_LOST
    from .client_events import ClientEvent as ClientEvent
    from .client_events import Closed as Closed
    from .client_events import Exited as Exited
    from .client_events import Failure as Failure
    from .client_events import HandshakeFailed as HandshakeFailed
    from .client_events import HttpBodyDelta as HttpBodyDelta
    from .client_events import Output as Output
    from .client_events import OutputLost as OutputLost
    from .client_events import Ready as Ready
    from .client_events import Response as Response
    from .client_events import ServerMisbehaved as ServerMisbehaved
    from .client_events import SessionLost as SessionLost
    from .events import ConnectionClosed as ConnectionClosed
    from .events import ConnectionOpened as ConnectionOpened
    from .events import Drain as Drain
    from .events import Encoded as Encoded
    from .events import Event as Event
    from .events import FinalizeFailed as FinalizeFailed
    from .events import FsCompleted as FsCompleted
    from .events import HttpBodyReceived as HttpBodyReceived
    from .events import HttpFinished as HttpFinished
    from .events import HttpResponded as HttpResponded
    from .events import MessageReceived as MessageReceived
    from .events import MissingChanged as MissingChanged
    from .events import OutputReceived as OutputReceived
    from .events import ProcessExited as ProcessExited
    from .events import ProcessSpawned as ProcessSpawned
    from .events import ProxyAsked as ProxyAsked
    from .events import SendBlocked as SendBlocked
    from .events import SendDrained as SendDrained
    from .events import Shutdown as Shutdown
    from .events import SpawnFailed as SpawnFailed
    from .events import StdinWritten as StdinWritten
    from .events import StreamClosed as StreamClosed
    from .events import Tick as Tick

# Each public name -> the submodule that defines it.
_WHERE = {name: module for module, names in {
    "._clientside._client": ("ClientCore",),
    "._clientside._client_tracks": ("ClientState",),
    "._config": ("Config", "Host"),
    "._env": ("EnvPolicy", "child_environment"),
    "._errors": ("INTERNAL_ERROR", "INVALID_PARAMS", "INVALID_REQUEST", "METHOD_NOT_FOUND",
                 "NOT_FOUND", "PARSE_ERROR", "SESSION_ATTACHED", "LocalProtocolError",
                 "UnsendableText", "RpcError"),
    "._paths": ("path_from_uri", "uri_from_path"),
    "._policy": ("PathRule", "Policy"),
    "._server": ("ServerCore",),
    "._session": ("Greeting",),
    "._trace": ("Recorder", "ReplayResult", "replay"),
    ".actions": ("Action", "AnswerProxy", "CancelHttp", "CloseConnection", "CloseStdin",
                 "EndSession", "Finalize", "FsRequest", "HttpRequest", "PauseOutput",
                 "ResizeTerminal", "ResumeOutput", "RunFs", "RunHttp", "Send", "Signal", "Spawn",
                 "SpawnSpec", "Unwatch", "WatchMissing", "WriteStdin"),
    ".client_events": ("CONNECTION_LOST", "ClientEvent", "Closed", "Exited", "Failure",
                       "HandshakeFailed", "HttpBodyDelta", "Output", "OutputLost", "Ready",
                       "Response", "ServerMisbehaved", "SessionLost"),
    ".events": ("ConnectionClosed", "ConnectionOpened", "Drain", "Encoded", "Event",
                "FinalizeFailed", "FsCompleted", "HttpBodyReceived", "HttpFinished",
                "HttpResponded", "MessageReceived", "MissingChanged", "OutputReceived",
                "ProcessExited", "ProcessSpawned", "ProxyAsked", "SendBlocked", "SendDrained",
                "Shutdown", "SpawnFailed", "StdinWritten", "StreamClosed", "Tick"),
}.items() for name in names}
# The client's events, still importable from here as they were before `execproto.client_events`
# held them, but not in ``__all__``: beside the server's events (`ConnectionClosed`,
# `ProcessExited`), `Closed` and `Exited` would read as one family. Import them from there.
_COMPATIBLE = ("Closed", "Exited", "Failure", "HandshakeFailed", "HttpBodyDelta", "Output",
               "OutputLost", "Ready", "Response", "ServerMisbehaved", "SessionLost")
# The public submodules, as `execproto.actions` was an attribute once anything was imported
# (`fs`: the file calls' requests, which `RunFs` carries).
_SUBMODULES = ("actions", "client_events", "events", "fs")

__all__ = [
    "CONNECTION_LOST",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NOT_FOUND",
    "PARSE_ERROR",
    "SESSION_ATTACHED",
    "Action",
    "AnswerProxy",
    "CancelHttp",
    "ClientCore",
    "ClientEvent",
    "ClientState",
    "CloseConnection",
    "CloseStdin",
    "Config",
    "ConnectionClosed",
    "ConnectionOpened",
    "Drain",
    "Encoded",
    "EndSession",
    "EnvPolicy",
    "Event",
    "Finalize",
    "FinalizeFailed",
    "FsCompleted",
    "FsRequest",
    "Greeting",
    "Host",
    "HttpBodyReceived",
    "HttpFinished",
    "HttpRequest",
    "HttpResponded",
    "LocalProtocolError",
    "UnsendableText",
    "MessageReceived",
    "MissingChanged",
    "OutputReceived",
    "PathRule",
    "PauseOutput",
    "Policy",
    "ProcessExited",
    "ProcessSpawned",
    "ProxyAsked",
    "Recorder",
    "ReplayResult",
    "ResizeTerminal",
    "ResumeOutput",
    "RpcError",
    "RunFs",
    "RunHttp",
    "Send",
    "SendBlocked",
    "SendDrained",
    "ServerCore",
    "Shutdown",
    "Signal",
    "Spawn",
    "SpawnFailed",
    "SpawnSpec",
    "StdinWritten",
    "StreamClosed",
    "Tick",
    "Unwatch",
    "WatchMissing",
    "WriteStdin",
    "child_environment",
    "path_from_uri",
    "replay",
    "uri_from_path",
]

def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return _load(f".{name}")
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_load(module), name)
    globals()[name] = value  # found once: from now on a plain global
    return value


def _load(relative: str) -> Any:
    # The import statement's own path (importlib.import_module is another, which
    # `python -X importtime` does not report).
    return __import__(__name__ + relative, fromlist=["*"])


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})
