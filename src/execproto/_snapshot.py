"""Shell snapshots: ``process/start``'s ``shellSnapshot`` (the ``shellSnapshotV2`` capability).

A Codex client runs every command as ``<shell> -lc <script>``, so the login profile runs for
each one. With a snapshot, the server runs the profile once per *scope* (a capture), keeps what
it left (functions, options, aliases, exported variables), and runs later commands of the same
scope without ``-l``, from that state (a replay): the profile does not run again.

Here: the request as the reference parses it (its deserializer's messages, serde's map or
sequence form), when it applies, and what the spawn carries (`ShellSnapshot`). The shells'
scripts, reading a capture and building a replay are in `_snapshot_shells`; running the capture
and keeping what it gave are the adapter's.

A request applies only to ``argv`` = ``[shell.path, "-lc", script, ...]``; any other command runs
as sent. Its scope is checked first (1..256 bytes), always; its shell's name only where it applies.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import attrs

from ._env import DEFAULT_EXCLUDES, EnvPolicy
from ._errors import invalid_params
from ._fields import Fields, text, wrong_type
from ._policy import Policy
from ._records import Record

# The shells a snapshot knows how to capture and replay, by the request's ``shell.name``.
SHELLS = ("bash", "zsh", "sh")
MAX_SCOPE_BYTES = 256
LOGIN_FLAG = "-lc"
BAD_SCOPE = f"shell snapshot scope must be non-empty and at most {MAX_SCOPE_BYTES} bytes"


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class SnapshotRequest(Record):
    """``shellSnapshot`` as sent: ``{scopeId, shell: {name, path}}``."""

    scope_id: str
    shell_name: str
    shell_path: str


def _struct(value: Any, struct: str, readers: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    """A struct's fields, read as serde reads them: from a map (each present field in the
    order sent, then the first missing one named) or from a sequence of the fields in order
    (each element as it comes, then a length that is not the fields' own)."""
    names = tuple(readers)
    if isinstance(value, list):
        got = {name: readers[name](item) for name, item in zip(names, value, strict=False)}
        if len(value) > len(names):
            raise invalid_params(f"invalid length {len(value)}, expected fewer elements in array")
        if len(value) < len(names):
            raise invalid_params(f"invalid length {len(value)}, expected struct {struct} "
                                 f"with {len(names)} elements")
        return got
    fields = Fields(value, struct)  # anything but a map: "invalid type: ..., expected struct"
    got = {name: readers[name](fields.raw(name)) for name in value if name in readers}
    for name in names:
        if name not in got:
            raise invalid_params(f"missing field `{name}`")
    return got


def _shell(value: Any) -> tuple[str, str]:
    if value is None:
        raise wrong_type(value, "struct ShellInfo")
    got = _struct(value, "ShellInfo", {"name": text, "path": text})
    return got["name"], got["path"]


def parse(value: Any) -> SnapshotRequest | None:
    """``shellSnapshot``, or None when it is absent or null."""
    if value is None:
        return None
    got = _struct(value, "ShellSnapshotRequest", {"scopeId": text, "shell": _shell})
    name, path = got["shell"]
    return SnapshotRequest(scope_id=got["scopeId"], shell_name=name, shell_path=path)


def applies(request: SnapshotRequest | None, argv: tuple[str, ...]) -> SnapshotRequest | None:
    """The request if it applies to ``argv``, else None (the command runs as sent). Raises
    -32602 for a scope out of bounds (whatever the argv) and for a shell it cannot snapshot
    (only where it applies), in the reference's order."""
    if request is None:
        return None
    if not 0 < len(request.scope_id.encode("utf-8", "surrogatepass")) <= MAX_SCOPE_BYTES:
        raise invalid_params(BAD_SCOPE)
    if len(argv) < 3 or argv[0] != request.shell_path or argv[1] != LOGIN_FLAG:
        return None
    if request.shell_name not in SHELLS:
        raise invalid_params(f"shell snapshots are unsupported for shell `{request.shell_name}`")
    return request


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ShellSnapshot(Record):
    """What a `SpawnSpec` carries when its command runs from a snapshot.

    ``key`` names what one capture serves: the session, scope, shell, cwd, env policy and
    sandbox (policy and proxy) of the start, as a digest (the env policy's values may be
    secrets; a digest keeps them out of traces and logs). A capture is made under the same
    sandbox as the command, so its content is the sandbox's (hostile) and is only ever replayed
    under a sandbox of the same key: never for another one, nor unsandboxed.

    How the captured environment joins the child's (`_snapshot_shells.replay`): captured
    variables matching ``drop`` (the policy's excludes), or not matching ``only`` (its
    includeOnly, when it has one), are left out; the child's own values of ``kept`` (the
    request's ``env`` and the policy's ``set``) win over captured ones."""

    key: str
    shell: str  # one of SHELLS
    kept: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    only: tuple[str, ...] = ()


def for_start(request: SnapshotRequest, *, session_id: str, cwd: str, env: dict[str, str],
              env_policy: EnvPolicy | None, sandbox: Policy | None,
              proxied: bool) -> ShellSnapshot:
    """The snapshot of a start that applies (see `applies`)."""
    policy_fields = None if env_policy is None else attrs.asdict(env_policy)
    sandbox_fields = None if sandbox is None else attrs.asdict(sandbox)
    identity = [session_id, request.scope_id, request.shell_name, request.shell_path, cwd,
                policy_fields, sandbox_fields, proxied]
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8",
                                                                      "surrogatepass")).hexdigest()
    kept = dict.fromkeys(env)
    drop: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    if env_policy is not None:
        kept.update(dict.fromkeys(name for name, _ in env_policy.set))
        drop = (() if env_policy.ignore_default_excludes else DEFAULT_EXCLUDES) + env_policy.exclude
        only = env_policy.include_only
    return ShellSnapshot(key=key, shell=request.shell_name, kept=tuple(kept), drop=drop,
                         only=only)
