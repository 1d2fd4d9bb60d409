"""execproto: the Codex exec-server protocol as a pure, I/O-free state machine.

Feed `ServerCore.handle` events and a time; carry out the actions it returns. Adapters that bind
it to real processes and websockets live in `execproto.adapters`.
"""

from ._actions import (
    Action,
    CancelHttp,
    CloseConnection,
    CloseStdin,
    Finalize,
    FsRequest,
    HttpRequest,
    PauseOutput,
    ResumeOutput,
    RunFs,
    RunHttp,
    Send,
    Signal,
    Spawn,
    SpawnSpec,
    WriteStdin,
)
from ._config import Config, Host
from ._env import EnvPolicy, child_environment
from ._errors import LocalProtocolError, RpcError
from ._events import (
    ConnectionClosed,
    ConnectionOpened,
    Event,
    FinalizeFailed,
    FsCompleted,
    HttpBodyReceived,
    HttpFinished,
    HttpResponded,
    MessageReceived,
    OutputReceived,
    ProcessExited,
    ProcessSpawned,
    SendBlocked,
    SendDrained,
    Shutdown,
    SpawnFailed,
    StreamClosed,
    Tick,
)
from ._paths import path_from_uri, uri_from_path
from ._server import ServerCore
from ._trace import Recorder, ReplayResult, replay

__all__ = [
    "Action",
    "CancelHttp",
    "CloseConnection",
    "CloseStdin",
    "Config",
    "ConnectionClosed",
    "ConnectionOpened",
    "EnvPolicy",
    "Event",
    "Finalize",
    "FinalizeFailed",
    "FsCompleted",
    "FsRequest",
    "Host",
    "HttpBodyReceived",
    "HttpFinished",
    "HttpRequest",
    "HttpResponded",
    "LocalProtocolError",
    "MessageReceived",
    "OutputReceived",
    "PauseOutput",
    "ProcessExited",
    "ProcessSpawned",
    "Recorder",
    "ReplayResult",
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
    "StreamClosed",
    "Tick",
    "WriteStdin",
    "child_environment",
    "path_from_uri",
    "replay",
    "uri_from_path",
]
