"""Typed, validated params for each method. A bad field raises `RpcError` (-32602).

The messages are the reference server's, which come from its deserializer: ``missing field `x` ``
for an absent required field, ``invalid type: <what came>, expected <what was wanted>`` for a
wrong one (an explicit null included), ``invalid number`` for a negative or fractional count.
Clients and their authors have seen these; keeping them means one set of errors to learn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from . import _sandbox
from ._b64 import decode as b64decode
from ._env import INHERIT_CHOICES, EnvPolicy, Inherit
from ._errors import invalid_params
from ._fields import Fields, text, wrong_type
from ._paths import cwd_from_uri
from ._records import Record
from ._sandbox import SandboxRequest
from .actions import SignalName

if TYPE_CHECKING:
    from ._snapshot import SnapshotRequest


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class InitializeParams(Record):
    client_name: str
    resume_session_id: str | None
    output_acks: bool  # execproto's: the client acknowledges output (see `process/ack`)


def initialize(params: Any) -> InitializeParams:
    fields = Fields(params, "InitializeParams")
    return InitializeParams(
        client_name=fields.text("clientName"),
        resume_session_id=fields.opt_text("resumeSessionId"),
        output_acks=fields.flag("outputAcks", default=False),
    )


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class StartParams(Record):
    process_id: str
    argv: tuple[str, ...]
    arg0: str | None
    cwd: str
    env: dict[str, str]
    tty: bool
    pipe_stdin: bool
    env_policy: EnvPolicy | None
    sandbox: SandboxRequest | None
    terminal_size: tuple[int, int] | None  # execproto's: (rows, cols) of a tty's first size
    # The managed network: whether the sandbox must enforce it, and its details and proxy as
    # sent (read by `_processes`, which knows whether the process gets a sandbox).
    enforce_managed_network: bool = False
    managed_network: Any = None
    network_proxy: Any = None
    # ``shellSnapshot``, where it applies to the argv (`_snapshot.applies`); None otherwise.
    shell_snapshot: SnapshotRequest | None = None


# A terminal's rows and columns: u16 in the kernel's struct winsize, and a 0 would mean "unknown"
# to programs that read it, so never what a client means.
MAX_DIMENSION = 65535


def _dimension(name: str) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or (
                not 1 <= value <= MAX_DIMENSION):
            raise invalid_params(f"{name} must be an integer from 1 to {MAX_DIMENSION}")
        return value
    return convert


def _terminal_size(fields: Fields, tty: bool) -> tuple[int, int] | None:
    """``rows`` and ``cols`` on a start: both or neither, and only for a terminal (a size
    that could never apply is the client's mistake, said at once)."""
    rows = fields.optional("rows", _dimension("rows"))
    cols = fields.optional("cols", _dimension("cols"))
    if rows is None and cols is None:
        return None
    if rows is None or cols is None:
        raise invalid_params("rows and cols must be given together")
    if not tty:
        raise invalid_params("rows and cols are only for a terminal (tty: true)")
    return rows, cols


def _inherit(value: Any) -> Inherit:
    name = text(value)
    for choice in INHERIT_CHOICES:
        if name == choice:
            return choice
    expected = ", ".join(f"`{choice}`" for choice in INHERIT_CHOICES)
    raise invalid_params(f"unknown variant `{name}`, expected one of {expected}")


def _env_policy(value: Any) -> EnvPolicy:
    # Every field is required, as in the reference: a policy is explicit or it is absent.
    fields = Fields(value, "ExecEnvPolicy")
    return EnvPolicy(
        inherit=fields.required("inherit", _inherit),
        ignore_default_excludes=fields.flag("ignoreDefaultExcludes"),
        exclude=fields.texts("exclude"),
        set=tuple(fields.text_map("set").items()),
        include_only=fields.texts("includeOnly"),
    )


def _os_text(value: str, field: str) -> str:
    """A string the OS will take as an argument or a variable: no NUL (a lone surrogate never
    gets this far: such a frame is no JSON-RPC message).

    Checked here so that the spawn cannot fail on it later (the reference's spawn fails with
    -32603 "nul byte found in provided data"; this names the field instead)."""
    if "\x00" in value:
        raise invalid_params(f"{field} must not contain a NUL byte")
    return value


def _os_env(env: Any, field: str) -> None:
    for name, value in env:
        _os_text(name, f"{field} name `{name}`")
        if not name or "=" in name:
            raise invalid_params(f"{field} name `{name}` must be non-empty and without `=`")
        _os_text(value, f"{field} `{name}`")


def _shell_snapshot(raw: Any) -> SnapshotRequest | None:
    """``shellSnapshot``, parsed by the shell snapshots' module, which is loaded at the first
    start that has one: no server's start pays for it."""
    if raw is None:
        return None
    from . import _snapshot

    return _snapshot.parse(raw)


def start(params: Any) -> StartParams:
    fields = Fields(params, "WireExecParams")
    process_id = fields.ident("processId")
    argv = fields.texts("argv")
    cwd = fields.text("cwd")
    env = fields.text_map("env")
    tty = fields.flag("tty")
    pipe_stdin = fields.flag("pipeStdin", False)
    arg0 = fields.opt_text("arg0")
    env_policy = fields.optional("envPolicy", _env_policy)
    sandbox = _sandbox.parse(fields.raw("sandbox"))
    terminal_size = _terminal_size(fields, tty)
    enforce_managed_network = fields.flag("enforceManagedNetwork", False)
    snapshot = _shell_snapshot(fields.raw("shellSnapshot"))
    if not argv:
        raise invalid_params("argv must not be empty")
    for index, arg in enumerate(argv):
        _os_text(arg, f"argv[{index}]")
    if arg0 is not None:
        _os_text(arg0, "arg0")
    _os_env(env.items(), "env")
    if env_policy is not None:
        _os_env(env_policy.set, "envPolicy.set")
    if snapshot is not None:
        from . import _snapshot

        snapshot = _snapshot.applies(snapshot, argv)
    return StartParams(
        process_id=process_id,
        argv=argv,
        arg0=arg0,
        cwd=cwd_from_uri(cwd),
        env=env,
        tty=tty,
        pipe_stdin=pipe_stdin,
        env_policy=env_policy,
        sandbox=sandbox,
        terminal_size=terminal_size,
        enforce_managed_network=enforce_managed_network,
        managed_network=fields.raw("managedNetwork"),
        network_proxy=fields.raw("networkProxy"),
        shell_snapshot=snapshot,
    )


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ReadParams(Record):
    process_id: str
    after_seq: int
    max_bytes: int | None
    wait_ms: int


def read(params: Any) -> ReadParams:
    fields = Fields(params, "ReadParams")
    return ReadParams(
        process_id=fields.ident("processId"),
        after_seq=fields.opt_uint("afterSeq") or 0,
        max_bytes=fields.opt_uint("maxBytes"),
        wait_ms=fields.opt_uint("waitMs") or 0,
    )


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class AckParams(Record):
    process_id: str
    seq: int


def ack(params: Any) -> AckParams:
    fields = Fields(params, "AckParams")
    return AckParams(process_id=fields.ident("processId"), seq=fields.uint("seq"))


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class WriteParams(Record):
    process_id: str
    chunk: bytes
    write_id: str
    # execproto's extension: close stdin after this write, so a program reading to EOF can end.
    close_stdin: bool


def write(params: Any) -> WriteParams:
    fields = Fields(params, "WriteParams")
    process_id = fields.ident("processId")
    chunk = fields.text("chunk")
    write_id = fields.ident("writeId")
    close_stdin = fields.flag("closeStdin", False)
    if not write_id:
        raise invalid_params("writeId must not be empty")
    return WriteParams(
        process_id=process_id,
        chunk=b64decode(chunk),
        write_id=write_id,
        close_stdin=close_stdin,
    )


# Wire name -> the signal the process group gets. The reference knows only "interrupt".
SIGNALS: dict[str, SignalName] = {"interrupt": "INT"}


def _signal(value: Any) -> SignalName:
    # An enum variant may be written as "name" or as {"name": null}.
    if isinstance(value, dict):
        if len(value) != 1:
            raise invalid_params("invalid value: map, expected map with a single key")
        (value,) = value
    elif not isinstance(value, str):
        raise wrong_type(value, "string or map")
    if value not in SIGNALS:
        expected = ", ".join(f"`{name}`" for name in SIGNALS)
        raise invalid_params(f"unknown variant `{value}`, expected {expected}")
    return SIGNALS[value]


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class SignalParams(Record):
    process_id: str
    signal: SignalName


def signal(params: Any) -> SignalParams:
    fields = Fields(params, "SignalParams")
    return SignalParams(
        process_id=fields.ident("processId"), signal=fields.required("signal", _signal)
    )


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ResizeParams(Record):
    process_id: str
    rows: int
    cols: int


def resize(params: Any) -> ResizeParams:
    """``process/resize`` (execproto's extension): a tty's new size."""
    fields = Fields(params, "ResizeParams")
    return ResizeParams(
        process_id=fields.ident("processId"),
        rows=fields.required("rows", _dimension("rows")),
        cols=fields.required("cols", _dimension("cols")),
    )


def terminate(params: Any) -> str:
    return Fields(params, "TerminateParams").ident("processId")


def unit(params: Any) -> None:
    """Params of a method that takes none: absent, null or an empty object."""
    if params is not None and not isinstance(params, dict):
        raise wrong_type(params, "unit")
