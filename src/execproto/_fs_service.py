"""The file calls: ``fs/*``, and the reads about the executor's own setup
(``environmentConfig/read``, capability discovery), validated here and run by the adapter.

Each call's params are parsed into its request (`execproto.fs`; the fs methods' in
`_fs_params`, the host's in `_host_params`), narrowed to the policy it may touch, checked
against the connection's open handles, and handed to the adapter as `RunFs`; the blocking work
comes back as `FsCompleted`. ``fs/watchMissing`` is `_watches`'.

Few clients use files: this module, `_fs_params`, `execproto.fs` and the classes of the fs
events and actions are loaded at the first file call or file event (`ServerCore.LATER`), not
at every start. The calls it keeps are the core's (`_services`' ops, shared with http's), so a
closed connection's calls go with it whichever they are.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import attrs

from . import _fs_params, _host_params, _sandbox
from ._errors import NOT_FOUND, LocalProtocolError, RpcError, invalid_params, invalid_request
from ._fs_actions import RunFs
from ._fs_events import FsCompleted, MissingChanged
from ._jsonrpc import Id
from ._policy import Policy, narrow
from ._sandbox import SandboxRequest
from ._services import ServiceHandlers, _Op
from ._session import Connection, Session
from ._watches import Watches
from .fs import (
    Close,
    DiscoverRoots,
    DiscoverSkills,
    FsRequest,
    Open,
    ReadBlock,
    ReadConfig,
    SkillRoot,
    Walk,
    WriteBlock,
)

Handler = Callable[[Connection, Session, Id, Any], None]
# A parsed call: its request, and the sandbox it asks for (None: none).
Parsed = tuple[FsRequest, SandboxRequest | None]


def unknown_handle(handle_id: str) -> RpcError:
    return RpcError(NOT_FOUND, f"unknown file handle `{handle_id}`")


def _read_config(raw: Any) -> Parsed:
    p = _host_params.config_read(raw)
    return ReadConfig(cwd=p["cwd"], config_paths=p["configPaths"],
                      requirements_paths=p["requirementsPaths"]), None


def _discover_skills(raw: Any) -> Parsed:
    p = _host_params.discover_v2(raw)
    return DiscoverSkills(cwd=p["cwd"]), p["sandbox"]  # its sandbox is among its params


def _discover_roots(raw: Any) -> tuple[DiscoverRoots, tuple[SandboxRequest | None, ...]]:
    """Each root is scanned under a sandbox of its own: the request, and what each asks."""
    roots = _host_params.discover_v1(raw)["roots"]
    request = DiscoverRoots(roots=tuple(SkillRoot(id=root["id"], path=root["path"])
                                        for root in roots))
    return request, tuple(root["sandbox"] for root in roots)


class FsService:
    """The file calls of one core, made at its first need."""

    def __init__(self, core: ServiceHandlers) -> None:
        self.core = core
        self.watches = Watches(core)
        # What a call of each kind must pass, once parsed, besides its policy: the handles of
        # its connection, the reference's ceilings. True: the call is answered already.
        self._checks: dict[type, Callable[[Connection, Id, Any], bool]] = {
            Walk: self._walk_limits,
            Open: self._opening,
            ReadBlock: self._handle_open,
            WriteBlock: self._writing_block,
            Close: self._closing,
        }

    def methods(self) -> dict[str, tuple[Callable[[Any], Any], Handler]]:
        """Each method: its parser and its handler."""
        return {
            **{name: (partial(_fs_params.parse, name), self.run) for name in _fs_params.PARSERS},
            "fs/watchMissing": (_fs_params.watch_missing, self.watches.watch_missing),
            "environmentConfig/read": (_read_config, self.run),
            "capabilities/discoverV2": (_discover_skills, self.run),
            "capabilityRoots/discoverV1": (_discover_roots, self.run_roots),
        }

    def event_handlers(self) -> dict[type, Callable[[Any], None]]:
        return {FsCompleted: self._completed, MissingChanged: self.watches.changed}

    def closed(self, c: Connection) -> None:
        """Connection ``c`` closed (its calls are dropped with the core's ops)."""
        self.watches.closed(c)

    def run(self, c: Connection, session: Session, msg_id: Id, parsed: Parsed) -> None:
        request, asked = parsed
        request = attrs.evolve(request, sandbox=self._policy(asked))
        check = self._checks.get(type(request))
        if check is not None and check(c, msg_id, request):
            return
        self._start(c, msg_id, request)

    def run_roots(self, c: Connection, session: Session, msg_id: Id,
                  parsed: tuple[DiscoverRoots, tuple[SandboxRequest | None, ...]]) -> None:
        request, asked = parsed
        request = attrs.evolve(request, sandbox=self._policy(None))
        roots = tuple(attrs.evolve(root, sandbox=self._policy(sandbox))
                      for root, sandbox in zip(request.roots, asked, strict=True))
        self._start(c, msg_id, attrs.evolve(request, roots=roots))

    def _start(self, c: Connection, msg_id: Id, request: FsRequest) -> None:
        op = self.core._take_op()
        self.core._ops[op] = _Op(c.conn, msg_id, request)
        c.ops.add(op)
        self.core._emit(RunFs(op=op, conn=c.conn, request=request))

    def _policy(self, asked: SandboxRequest | None) -> Policy | None:
        """What a file call asking for ``asked`` may touch: the client's sandbox, narrowed by
        the operator's floor, secrets and protected paths."""
        if asked is not None and asked.dynamic and asked.cwd is None:
            raise invalid_params(
                "file system sandbox context with dynamic permissions requires cwd")
        cwd = asked.cwd if asked is not None else None
        config = self.core.config
        asked_policy = _sandbox.policy(asked, cwd, self.core.host.env.get("TMPDIR"))
        return narrow(config.floor, asked_policy, config.secrets, config.protected)

    # -- the checks, by kind of call ------------------------------------------------------------

    def _walk_limits(self, c: Connection, msg_id: Id, request: Walk) -> bool:
        _fs_params.walk_limits(request)
        return False

    def _opening(self, c: Connection, msg_id: Id, request: Open) -> bool:
        if request.handle_id in c.fs_handles:
            raise invalid_request(f"file handle `{request.handle_id}` already exists")
        limit = self.core.config.max_fs_handles
        if len(c.fs_handles) >= limit:
            raise invalid_request(f"too many open file handles: at most {limit}")
        self.core._check_descriptors(1)
        # Reserved now, so the limit counts opens in flight; released if the open fails.
        c.fs_handles.add(request.handle_id)
        return False

    def _handle_open(self, c: Connection, msg_id: Id, request: ReadBlock | WriteBlock) -> bool:
        if request.handle_id not in c.fs_handles:
            raise unknown_handle(request.handle_id)
        return False

    def _writing_block(self, c: Connection, msg_id: Id, request: WriteBlock) -> bool:
        self._handle_open(c, msg_id, request)
        _fs_params.write_range(request)
        return False

    def _closing(self, c: Connection, msg_id: Id, request: Close) -> bool:
        if request.handle_id not in c.fs_handles:
            # Closing twice is harmless, as in the reference.
            self.core._respond(c.conn, msg_id, {})
            return True
        c.fs_handles.discard(request.handle_id)
        return False

    # -- answers --------------------------------------------------------------------------------

    def _completed(self, event: FsCompleted) -> None:
        entry = self.core._take_entry(event.op)
        if entry is None:
            return
        if entry.request is None:
            raise LocalProtocolError(f"op {event.op} is an http request, not an fs call")
        if event.error is not None:
            if isinstance(entry.request, Open):
                self.core._conns[entry.conn].fs_handles.discard(entry.request.handle_id)
            self.core._fail(entry.conn, entry.id, event.error)
        else:
            result = event.result if event.result is not None else {}
            self.core._respond(entry.conn, entry.id, result)
