"""The client's ``sandbox`` object (a Codex permission profile) read into a `Policy`.

``process/start`` and the ``fs/*`` methods may carry one. Its shape and its error messages are
the reference's (measured against 0.171.0): serde's words, naming the value, not the field.

    {"permissions": {"type": "managed", "file_system": FS, "network": "restricted"}
                  | {"type": "disabled"} | {"type": "external", "network": ...},
     "cwd": URI?, "workspaceRoots": [URI]?, "windowsSandboxLevel": ..., ...}
    FS: {"type": "restricted", "entries": [ENTRY], "glob_scan_max_depth": N?}
      | {"type": "unrestricted"}
    ENTRY: {"path": {"type": "special", "value": {"kind": K, "subpath": S?}}
                  | {"type": "path", "path": URI} | {"type": "glob_pattern", "pattern": P},
            "access": "read" | "write" | "none" | "deny", "missing_path_behavior": "skip"?}

What each profile means here:
- ``disabled``: no sandbox (None). The reference reports ``linuxSeccomp`` for it although it
  enforces nothing; execproto reports what is true.
- ``external``, and ``managed`` with an unrestricted file system: everything writable, the
  network as asked (None when the network is enabled too: nothing is restricted).
- ``managed`` restricted: the entries, special paths resolved against the sandbox's cwd, its
  workspace roots (the cwd when none are given) and the process's ``TMPDIR``. ``minimal`` is
  the system directories a program needs to run. A ``glob_pattern`` entry that denies is kept
  for the adapter to expand; one that grants is ignored (it can only grant less, never more).
  A special kind the server does not know (``unknown``) that denies cannot be honoured, so the
  request is refused; one that grants is ignored.
- Beneath every writable entry but `/`, the names in `PROTECTED` stay read-only, whatever the
  entries say (the reference does so, measured: its sandbox makes a missing one an empty
  read-only directory). A command could otherwise plant git hooks, a `.codex` config or
  credentials that the next command, or the user's own tools, would trust.
"""

from __future__ import annotations

import posixpath
from typing import Any

import attrs

from ._errors import INVALID_PARAMS, RpcError, invalid_params, invalid_request
from ._fields import Fields, text, wrong_type
from ._jsonrpc import describe
from ._paths import PATH_MAX, ForeignPath, parse_uri
from ._policy import PathRule, Policy
from ._records import Record

CANNOT_ENFORCE = "sandbox intent cannot be enforced on this executor"
# Every entry becomes a mount at each start: a request for thousands would tie the server up
# setting them up (Codex sends fewer than ten).
MAX_ENTRIES = 256

# The system directories a program needs (the ``minimal`` special path).
MINIMAL = ("/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc")

# Held read-only beneath each writable entry (but `/`): repository, agent and cloud metadata.
PROTECTED = (".git", ".agents", ".codex", ".aws")

ACCESS = {"read": "read", "write": "write", "deny": "none", "none": "none"}
NETWORK = {"restricted": False, "enabled": True}
_PROFILES = ("managed", "disabled", "external")
_FILE_SYSTEMS = ("restricted", "unrestricted")
_PATH_TYPES = ("path", "glob_pattern", "special")
_KINDS = ("root", "minimal", "current_working_directory", "project_roots", "tmpdir",
          "slash_tmp", "unknown")
_WINDOWS_LEVELS = ("disabled", "restricted-token", "elevated", "mxc")
_PROXY_MODES = ("reconcile", "preserve")
_MISSING = ("skip",)
# Kinds whose path depends on the sandbox's cwd: an fs call that uses them must give one.
_DYNAMIC = ("current_working_directory", "project_roots")


def _expected(choices: tuple[str, ...]) -> str:
    names = [f"`{choice}`" for choice in choices]
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} or {names[1]}"
    return "one of " + ", ".join(names)


def _variant(value: Any, choices: tuple[str, ...]) -> str:
    """A unit enum variant: a string, or a map with the variant as its one key."""
    if isinstance(value, dict) and len(value) == 1:
        (value,) = value
    elif not isinstance(value, str):
        raise wrong_type(value, "string or map")
    if value not in choices:
        raise invalid_params(f"unknown variant `{value}`, expected {_expected(choices)}")
    return str(value)


def _tagged(value: Any, enum: str, tag: str, choices: tuple[str, ...]) -> tuple[Fields, str]:
    """An internally tagged enum: a map whose ``tag`` field names the variant."""
    if not isinstance(value, dict):
        raise invalid_params(
            f"invalid type: {describe(value)}, expected internally tagged enum {enum}")
    fields = Fields(value, enum)
    kind = fields.text(tag)
    if kind not in choices:
        raise invalid_params(f"unknown variant `{kind}`, expected {_expected(choices)}")
    return fields, kind


def _present(fields: Fields, name: str) -> Any:
    """A field that may be absent but, when present, not null."""
    value = fields.raw(name)
    if value is None and fields.has(name):
        raise wrong_type(None, "a sequence" if name == "workspaceRoots" else "a boolean")
    return value


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class _Entry(Record):
    kind: str  # "path", "glob", or a special kind
    path: str  # the native path, the pattern, or the subpath ("" for none)
    access: str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class SandboxRequest(Record):
    """A parsed ``sandbox`` object, before its special paths are resolved."""

    restricted_fs: bool
    entries: tuple[_Entry, ...]
    network: bool
    disabled: bool
    cwd: str | None
    workspace_roots: tuple[str, ...]

    @property
    def dynamic(self) -> bool:
        return any(entry.kind in _DYNAMIC for entry in self.entries)


class _Uris:
    """Turns the request's URIs into paths, with the reference's words for each place."""

    def __init__(self, for_fs: bool) -> None:
        self.for_fs = for_fs

    def path(self, uri: str, what: str) -> str:
        try:
            return parse_uri(uri)
        except ForeignPath:
            if self.for_fs:
                prefix = "" if what == "cwd" else f"invalid sandbox {what}: "
                if what == "permission path":
                    prefix = "invalid sandbox permission path URI: "
                raise invalid_request(f"{prefix}'{uri}' is invalid on 'linux'") from None
            raise RpcError(
                INVALID_PARAMS,
                f"failed to prepare process sandbox: invalid sandbox {what}: "
                f"'{uri}' is invalid on 'linux'",
                {"kind": "sandboxPreparation"},
            ) from None


def _entry(raw: Any, uris: _Uris) -> _Entry:
    if not isinstance(raw, dict):
        raise wrong_type(raw, "struct ExecFileSystemSandboxEntry")
    fields = Fields(raw, "ExecFileSystemSandboxEntry")
    path, kind = _tagged(fields.required("path", _any), "FileSystemPath", "type", _PATH_TYPES)
    if kind == "path":
        where = uris.path(path.text("path"), "permission path")
        target = _Entry(kind="path", path=where, access="")
    elif kind == "glob_pattern":
        target = _Entry(kind="glob", path=_no_nul(path.text("pattern"), "pattern"), access="")
    else:
        special, name = _tagged(path.required("value", _any), "FileSystemSpecialPath", "kind",
                                _KINDS)
        if name == "unknown":
            special.text("path")
        subpath = _no_nul(special.opt_text("subpath") or "", "subpath")
        target = _Entry(kind=name, path=subpath, access="")
    access = ACCESS[_variant(fields.required("access", _any), tuple(ACCESS))]
    fields.optional("missing_path_behavior", lambda v: _variant(v, _MISSING))
    return attrs.evolve(target, access=access)


def _no_nul(value: str, field: str) -> str:
    """A pattern or subpath, bounded as a path is: each costs work per start (joined, resolved,
    matched against every entry a pattern expands to), so a 48 KB one must not get that far."""
    if "\x00" in value:
        raise invalid_params(f"a sandbox {field} must not contain a NUL byte")
    if len(value.encode("utf-8", "surrogatepass")) >= PATH_MAX:
        raise invalid_params(f"a sandbox {field} is longer than {PATH_MAX - 1} bytes")
    return value


def _any(value: Any) -> Any:
    return value


def _file_system(raw: Any, uris: _Uris) -> tuple[bool, tuple[_Entry, ...]]:
    fields, kind = _tagged(raw, "FileSystemSandboxPolicy", "type", _FILE_SYSTEMS)
    if kind == "unrestricted":
        return False, ()
    entries = fields.required("entries", _any)
    if not isinstance(entries, list):
        raise wrong_type(entries, "a sequence")
    if len(entries) > MAX_ENTRIES:
        raise invalid_params(f"a sandbox may have at most {MAX_ENTRIES} file system entries, "
                             f"not {len(entries)}")
    depth = fields.optional("glob_scan_max_depth", _any)
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise invalid_params(f"invalid value: integer `{depth}`, expected a nonzero usize")
    return True, tuple(_entry(entry, uris) for entry in entries)


def parse(raw: Any, for_fs: bool = False) -> SandboxRequest | None:
    """The ``sandbox`` param (None when absent or null); -32602 for a malformed one."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise wrong_type(raw, "struct WireFileSystemSandboxContext")
    uris = _Uris(for_fs)
    fields = Fields(raw, "WireFileSystemSandboxContext")
    profile, kind = _tagged(fields.required("permissions", _any), "ExecPermissionProfile", "type",
                            _PROFILES)
    restricted_fs, network = False, True
    entries: tuple[_Entry, ...] = ()
    if kind == "managed":
        restricted_fs, entries = _file_system(profile.required("file_system", _any), uris)
    if kind != "disabled":
        network = NETWORK[_variant(profile.required("network", _any), tuple(NETWORK))]
    cwd = fields.opt_text("cwd")
    roots = _present(fields, "workspaceRoots")
    if roots is not None and not isinstance(roots, list):
        raise wrong_type(roots, "a sequence")
    fields.required("windowsSandboxLevel", lambda v: _variant(v, _WINDOWS_LEVELS))
    fields.optional("windowsSandboxProxySettingsMode", lambda v: _variant(v, _PROXY_MODES))
    legacy = _present(fields, "useLegacyLandlock")
    if legacy is not None and not isinstance(legacy, bool):
        raise wrong_type(legacy, "a boolean")
    temporary = fields.raw("temporaryDirectories")
    if temporary is not None and not isinstance(temporary, list):
        raise wrong_type(temporary, "a sequence")
    return SandboxRequest(
        restricted_fs=restricted_fs,
        entries=entries,
        network=network,
        disabled=kind == "disabled",
        cwd=None if cwd is None else uris.path(cwd, "cwd" if for_fs else "policy cwd"),
        workspace_roots=tuple(uris.path(text(root), "workspace root") for root in roots or ()),
    )


def policy(request: SandboxRequest | None, cwd: str | None, tmpdir: str | None) -> Policy | None:
    """What ``request`` allows, with special paths resolved: ``cwd`` is the sandbox's (its own
    or, on process/start, the process's), ``tmpdir`` the process's TMPDIR. None: unrestricted.
    Raises -32602 CANNOT_ENFORCE for a denial this server cannot carry out."""
    if request is None or request.disabled:
        return None
    if not request.restricted_fs:
        return None if request.network else Policy.of([PathRule(path="/", access="write")], False)
    roots = request.workspace_roots or ((cwd,) if cwd is not None else ())
    rules: list[PathRule] = []
    globs: list[str] = []
    for entry in request.entries:
        for path in _paths(entry, cwd, roots, tmpdir):
            rules.append(PathRule(path=path, access=entry.access))
            if entry.access == "write" and posixpath.normpath(path) != "/":
                rules += [PathRule(path=posixpath.join(path, name), access="read")
                          for name in PROTECTED]
        if entry.kind == "glob" and entry.access == "none":
            globs.append(entry.path if entry.path.startswith("/") or cwd is None
                         else posixpath.join(cwd, entry.path))
        if entry.kind == "unknown" and entry.access == "none":
            raise invalid_params(CANNOT_ENFORCE)
    return Policy.of(rules, request.network, deny_globs=globs)


def _paths(entry: _Entry, cwd: str | None, roots: tuple[str, ...], tmpdir: str | None) -> list[str]:
    """The absolute paths an entry names (none for globs and unknown kinds)."""
    bases: dict[str, tuple[str, ...]] = {
        "path": (entry.path,),
        "root": ("/",),
        "minimal": MINIMAL,
        "current_working_directory": (cwd,) if cwd is not None else (),
        "project_roots": roots,
        "tmpdir": (tmpdir,) if tmpdir else (),
        "slash_tmp": ("/tmp",),
    }
    found = bases.get(entry.kind, ())
    if entry.kind in ("path", "root", "minimal") or not entry.path:
        return list(found)
    return [posixpath.normpath(posixpath.join(base, entry.path)) for base in found]


# What the reference's output scan looks for (lower case) to call a failure a sandbox denial.
DENIAL_WORDS = (b"operation not permitted", b"permission denied", b"read-only file system",
                b"seccomp", b"sandbox", b"landlock", b"failed to write file")
# Failures that are the program's own (usage, cannot execute, not found), whatever it printed...
_OWN_FAILURES = (2, 126, 127)
# ...and the one that is the sandbox's even if it printed nothing: killed by SIGSYS (seccomp).
_SIGSYS_EXIT = 128 + 31


def mentions_denial(data: bytes) -> bool:
    lowered = data.lower()
    return any(word in lowered for word in DENIAL_WORDS)


def likely_denied(exit_code: int | None, mentioned: bool) -> bool:
    """``sandboxDenied`` for a sandboxed process, as the reference guesses it: a failure whose
    output mentions a denial, or a death by SIGSYS. A guess, not a signal from the kernel."""
    if not exit_code:
        return False
    if mentioned:
        return True
    return exit_code not in _OWN_FAILURES and exit_code == _SIGSYS_EXIT
