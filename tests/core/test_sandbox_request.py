"""The client's `sandbox` object: parsed with the reference's errors, resolved into a policy,
narrowed by the operator's floor, refused when nothing here can enforce it, reported truthfully.

The error messages are the reference's (0.171.0), measured by sending it the same objects.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from execproto import Config, FsRequest, Host, PathRule, Policy, ProcessSpawned, RunFs, Spawn
from execproto._policy import KERNEL_KNOBS
from execproto._sandbox import likely_denied, mentions_denial

from .harness import Harness

WS = "file:///w"


def held(policy: Policy) -> Policy:
    """``policy`` as every sandbox gets it: the kernel's knobs held read-only."""
    return policy.capped(KERNEL_KNOBS, "read")


def special(kind: str, access: str, subpath: str | None = None) -> dict[str, Any]:
    value: dict[str, Any] = {"kind": kind}
    if subpath is not None:
        value["subpath"] = subpath
    return {"path": {"type": "special", "value": value}, "access": access}


READ_ONLY: dict[str, Any] = {
    "permissions": {"type": "managed",
                    "file_system": {"type": "restricted", "entries": [special("root", "read")]},
                    "network": "restricted"},
    "cwd": WS, "workspaceRoots": [WS], "windowsSandboxLevel": "disabled",
    "windowsSandboxProxySettingsMode": "reconcile", "useLegacyLandlock": False,
}
WORKSPACE_WRITE = copy.deepcopy(READ_ONLY)
WORKSPACE_WRITE["permissions"]["file_system"]["entries"] += [
    special("project_roots", "write"), special("slash_tmp", "write"), special("tmpdir", "write"),
    dict(special("project_roots", "read", ".git"), missing_path_behavior="skip"),
]

ENFORCING = Config(sandbox_type="linuxSeccomp")


def started(sandbox: Any, config: Config = ENFORCING, env: dict[str, str] | None = None,
            cwd: str = "file:///elsewhere") -> tuple[Harness, dict[str, Any], Spawn | None]:
    h = Harness(config, Host(env={"TMPDIR": "/host-tmp"}))
    h.connect()
    h.handshake()
    msg_id = h.request(1, "process/start", {"processId": "p", "argv": ["true"], "cwd": cwd,
                                            "env": env or {}, "tty": False, "sandbox": sandbox})
    spawns = h.of_type(Spawn)
    return h, {"msg_id": msg_id}, spawns[-1] if spawns else None


def error_for(sandbox: Any) -> dict[str, Any] | None:
    h, info, spawn = started(sandbox)
    response = h.response(1, info["msg_id"])
    assert (spawn is None) == (response is not None), "an error, or a spawn, never both"
    return None if response is None else response["error"]


def changed(path: list[Any], value: Any, base: dict[str, Any] = READ_ONLY) -> dict[str, Any]:
    """``base`` with the field at ``path`` set to ``value`` (or removed, for ``...``)."""
    out = copy.deepcopy(base)
    target: Any = out
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


ENTRY = ["permissions", "file_system", "entries", 0]
REJECTED = [
    ({}, "missing field `permissions`"),
    ("read-only", 'invalid type: string "read-only", expected struct WireFileSystemSandboxContext'),
    (changed(["permissions"], None),
     "invalid type: null, expected internally tagged enum ExecPermissionProfile"),
    (changed(["permissions", "type"], "foo"),
     "unknown variant `foo`, expected one of `managed`, `disabled`, `external`"),
    (changed(["permissions", "type"], ...), "missing field `type`"),
    (changed(["permissions", "file_system"], ...), "missing field `file_system`"),
    (changed(["permissions", "network"], ...), "missing field `network`"),
    ({**READ_ONLY, "permissions": {"type": "external"}}, "missing field `network`"),
    (changed(["permissions", "network"], "disabled"),
     "unknown variant `disabled`, expected `restricted` or `enabled`"),
    (changed(["permissions", "network"], True),
     "invalid type: boolean `true`, expected string or map"),
    (changed(["permissions", "file_system", "type"], "external_sandbox"),
     "unknown variant `external_sandbox`, expected `restricted` or `unrestricted`"),
    (changed(["permissions", "file_system", "entries"], ...), "missing field `entries`"),
    (changed(["permissions", "file_system", "entries"], None),
     "invalid type: null, expected a sequence"),
    (changed(["permissions", "file_system", "glob_scan_max_depth"], 0),
     "invalid value: integer `0`, expected a nonzero usize"),
    (changed(ENTRY, special("home", "read")),
     "unknown variant `home`, expected one of `root`, `minimal`, `current_working_directory`, "
     "`project_roots`, `tmpdir`, `slash_tmp`, `unknown`"),
    (changed(ENTRY, special("unknown", "read")), "missing field `path`"),
    (changed(ENTRY + ["path", "value"], {}), "missing field `kind`"),
    (changed(ENTRY + ["path"], {"type": "path", "path": "/etc"}),
     "invalid URI: relative URL without a base"),
    (changed(ENTRY + ["path"], {"type": "path", "path": "http://x/etc"}),
     "unsupported path URI scheme `http`"),
    (changed(ENTRY + ["path"], {"type": "foo"}),
     "unknown variant `foo`, expected one of `path`, `glob_pattern`, `special`"),
    (changed(ENTRY + ["access"], "READ"),
     "unknown variant `READ`, expected one of `read`, `write`, `deny`, `none`"),
    (changed(ENTRY + ["access"], None), "invalid type: null, expected string or map"),
    (changed(ENTRY + ["access"], ...), "missing field `access`"),
    (changed(ENTRY + ["missing_path_behavior"], "create"),
     "unknown variant `create`, expected `skip`"),
    (changed(ENTRY, "tmpdir"),
     'invalid type: string "tmpdir", expected struct ExecFileSystemSandboxEntry'),
    (changed(["cwd"], "/w"), "invalid URI: relative URL without a base"),
    (changed(["cwd"], 5), "invalid type: number, expected a string"),
    (changed(["workspaceRoots"], None), "invalid type: null, expected a sequence"),
    (changed(["windowsSandboxLevel"], ...), "missing field `windowsSandboxLevel`"),
    (changed(["windowsSandboxLevel"], "restricted_token"),
     "unknown variant `restricted_token`, expected one of `disabled`, `restricted-token`, "
     "`elevated`, `mxc`"),
    (changed(["windowsSandboxProxySettingsMode"], "foo"),
     "unknown variant `foo`, expected `reconcile` or `preserve`"),
    (changed(["useLegacyLandlock"], "no"), 'invalid type: string "no", expected a boolean'),
    (changed(["useLegacyLandlock"], None), "invalid type: null, expected a boolean"),
    (changed(["temporaryDirectories"], "x"), 'invalid type: string "x", expected a sequence'),
]


@pytest.mark.parametrize(("sandbox", "message"), REJECTED)
def test_a_malformed_sandbox_is_refused_as_the_reference_refuses_it(
    sandbox: Any, message: str
) -> None:
    assert error_for(sandbox) == {"code": -32602, "message": message}


def test_a_uri_for_another_host_is_a_preparation_error() -> None:
    bad = changed(ENTRY + ["path"], {"type": "path", "path": "file://host/etc"})
    assert error_for(bad) == {
        "code": -32602, "data": {"kind": "sandboxPreparation"},
        "message": "failed to prepare process sandbox: invalid sandbox permission path: "
                   "'file://host/etc' is invalid on 'linux'"}
    assert error_for(changed(["workspaceRoots"], ["file://host/x"]))["message"] == (  # type: ignore[index]
        "failed to prepare process sandbox: invalid sandbox workspace root: "
        "'file://host/x' is invalid on 'linux'")


ACCEPTED = [
    changed(["cwd"], None),
    changed(["cwd"], ...),
    changed(["workspaceRoots"], ...),
    changed(["windowsSandboxProxySettingsMode"], None),
    changed(["useLegacyLandlock"], ...),
    changed(ENTRY + ["access"], {"read": None}),
    changed(ENTRY + ["missing_path_behavior"], None),
    dict(READ_ONLY, unknownField=1, temporaryDirectories=[WS]),
]


@pytest.mark.parametrize("sandbox", ACCEPTED)
def test_optional_and_unknown_fields_are_accepted(sandbox: Any) -> None:
    assert error_for(sandbox) is None


def policy_of(sandbox: Any, **kwargs: Any) -> Policy | None:
    _, _, spawn = started(sandbox, **kwargs)
    assert spawn is not None
    return spawn.spec.sandbox


def test_read_only_reads_everything_and_writes_nothing() -> None:
    policy = policy_of(READ_ONLY)
    assert policy == held(Policy(rules=(PathRule(path="/", access="read"),), network=False))


def test_workspace_write_resolves_its_special_paths() -> None:
    policy = policy_of(WORKSPACE_WRITE, env={"TMPDIR": "/proc-tmp"})
    assert policy is not None
    assert policy.access("/etc") == "read"
    assert policy.access("/w/src") == "write"
    assert policy.access("/w/.git/config") == "read"
    assert policy.access("/tmp/x") == "write"
    assert policy.access("/proc-tmp/x") == "write"  # the process's TMPDIR, not the server's
    assert policy.access("/host-tmp/x") == "read"
    assert policy.network is False


def test_project_roots_default_to_the_cwd_and_subpaths_are_normalized() -> None:
    sandbox = changed(["workspaceRoots"], ..., WORKSPACE_WRITE)
    sandbox = changed(["cwd"], ..., sandbox)
    entries = sandbox["permissions"]["file_system"]["entries"]
    entries.append(special("project_roots", "none", "../s"))
    policy = policy_of(sandbox, cwd="file:///proc-cwd/a")
    assert policy is not None
    assert policy.access("/proc-cwd/a/x") == "write"  # the process's cwd stands in
    assert policy.access("/proc-cwd/s") == "none"


def test_minimal_cwd_and_explicit_paths() -> None:
    entries = [special("minimal", "read"), special("current_working_directory", "write"),
               {"path": {"type": "path", "path": "file:///data/x"}, "access": "deny"},
               {"path": {"type": "glob_pattern", "pattern": "*.env"}, "access": "none"},
               {"path": {"type": "glob_pattern", "pattern": "/grant/*"}, "access": "write"}]
    policy = policy_of(changed(["permissions", "file_system", "entries"], entries))
    assert policy is not None
    assert policy.access("/usr/bin/sh") == "read"
    assert policy.access("/home") == "none"
    assert policy.access("/w/a") == "write"
    assert policy.access("/data/x/y") == "none"
    assert policy.deny_globs == ("/w/*.env",)  # relative to the sandbox's cwd
    assert policy.access("/grant/a") == "none"  # a granting pattern grants nothing


def test_profiles_that_restrict_nothing_run_unsandboxed_and_say_so() -> None:
    unrestricted = {
        "type": "managed", "file_system": {"type": "unrestricted"}, "network": "enabled"}
    for permissions in ({"type": "disabled"}, {"type": "external", "network": "enabled"},
                        unrestricted):
        h, info, spawn = started(dict(READ_ONLY, permissions=permissions))
        assert spawn is not None and spawn.spec.sandbox is None
        h.feed(ProcessSpawned(proc=spawn.proc, pid=5))
        assert h.response(1, info["msg_id"])["result"]["sandboxType"] == "none"  # type: ignore[index]


def test_a_network_only_sandbox_keeps_every_path_writable() -> None:
    policy = policy_of(dict(READ_ONLY, permissions={"type": "external", "network": "restricted"}))
    assert policy == held(Policy(rules=(PathRule(path="/", access="write"),), network=False))


def test_the_floor_narrows_every_request() -> None:
    floor = Policy.of(
        [PathRule(path="/", access="read"), PathRule(path="/w", access="write")], False)
    config = Config(sandbox_type="linuxSeccomp", floor=floor)
    assert policy_of(None, config=config) == held(floor)
    disabled = policy_of(dict(READ_ONLY, permissions={"type": "disabled"}), config=config)
    assert disabled == held(floor)
    everything = changed(ENTRY + ["access"], "write")
    everything["permissions"]["network"] = "enabled"
    wide = policy_of(everything, config=config)
    assert wide is not None and wide.access("/etc") == "read" and wide.network is False
    read_only = policy_of(READ_ONLY, config=config)
    assert read_only is not None and read_only.access("/w/x") == "read"


def test_a_sandbox_nothing_here_can_enforce_is_refused_and_nothing_runs() -> None:
    message = "sandbox intent cannot be enforced on this executor"
    h, info, spawn = started(READ_ONLY, config=Config())
    assert spawn is None
    assert h.response(1, info["msg_id"])["error"] == {"code": -32602, "message": message}  # type: ignore[index]
    assert error_for(changed(ENTRY, special("unknown", "none") | {
        "path": {"type": "special", "value": {"kind": "unknown", "path": "x"}}})) == {
        "code": -32602, "message": message}
    _, _, spawn = started(None, config=Config())
    assert spawn is not None and spawn.spec.sandbox is None  # no sandbox asked: it runs


def test_a_sandboxed_start_reports_the_enforcers_name_and_guesses_denials() -> None:
    h, info, spawn = started(READ_ONLY)
    assert spawn is not None
    h.feed(ProcessSpawned(proc=spawn.proc, pid=5))
    assert h.response(1, info["msg_id"])["result"]["sandboxType"] == "linuxSeccomp"  # type: ignore[index]
    h.output(spawn.proc, "stderr", b"sh: cannot create x: Read-only file ")
    h.output(spawn.proc, "stderr", b"system\n")  # the words split between two chunks
    h.eof(spawn.proc, "stdout")
    h.eof(spawn.proc, "stderr")
    h.exit(spawn.proc, 2)
    exited = h.notifications(1, "process/exited")[0]["params"]
    assert exited["sandboxDenied"] is True
    read = h.call(1, "process/read", {"processId": "p"})["result"]
    assert read["sandboxDenied"] is True
    h.assert_replays()


@pytest.mark.parametrize(("exit_code", "output", "denied"), [
    (0, b"permission denied", False),
    (1, b"Operation not permitted", True),
    (1, b"plain failure", False),
    (126, b"", False),
    (159, b"", True),
    (2, b"sandbox", True),
])
def test_the_denial_guess_is_the_references(exit_code: int, output: bytes, denied: bool) -> None:
    assert likely_denied(exit_code, mentions_denial(output)) is denied


def test_an_unsandboxed_process_is_never_called_denied() -> None:
    h, _, spawn = started(None)
    assert spawn is not None
    h.feed(ProcessSpawned(proc=spawn.proc, pid=5))
    h.output(spawn.proc, "stderr", b"Permission denied\n")
    h.exit(spawn.proc, 1)
    assert h.notifications(1, "process/exited")[0]["params"]["sandboxDenied"] is False


def fs_call(sandbox: Any, config: Config = ENFORCING) -> tuple[Harness, int]:
    h = Harness(config, Host(env={"TMPDIR": "/host-tmp"}))
    h.connect()
    h.handshake()
    msg_id = h.request(1, "fs/writeFile", {"path": "file:///w/f", "dataBase64": "eA==",
                                           "sandbox": sandbox})
    return h, msg_id


def test_fs_calls_carry_the_same_policy() -> None:
    h, _ = fs_call(WORKSPACE_WRITE)
    (run,) = h.of_type(RunFs)
    request: FsRequest = run.request
    assert request.sandbox is not None and request.sandbox.access("/w/x") == "write"
    assert request.sandbox.access("/host-tmp/x") == "write"  # no process: the server's TMPDIR
    h, _ = fs_call(None)
    assert h.of_type(RunFs)[0].request.sandbox is None
    floor = Policy.of([PathRule(path="/", access="read")], False)
    h, _ = fs_call(None, Config(floor=floor))
    assert h.of_type(RunFs)[0].request.sandbox == held(floor)
    h.assert_replays()


def test_an_fs_sandbox_naming_workspace_paths_needs_a_cwd() -> None:
    h, msg_id = fs_call(changed(["cwd"], ..., WORKSPACE_WRITE))
    assert h.response(1, msg_id)["error"] == {  # type: ignore[index]
        "code": -32602,
        "message": "file system sandbox context with dynamic permissions requires cwd"}
    h, msg_id = fs_call(changed(["cwd"], ..., READ_ONLY))
    assert h.of_type(RunFs), "a profile without workspace paths needs none"
    bad = changed(["workspaceRoots"], ["file://host/x"], WORKSPACE_WRITE)
    h, msg_id = fs_call(bad)
    assert h.response(1, msg_id)["error"] == {  # type: ignore[index]
        "code": -32600,
        "message": "invalid sandbox workspace root: 'file://host/x' is invalid on 'linux'"}


def test_a_sandbox_of_too_many_entries_or_nul_bytes_is_refused() -> None:
    many = changed(["permissions", "file_system", "entries"], [special("root", "read")] * 257)
    assert error_for(many) == {
        "code": -32602, "message": "a sandbox may have at most 256 file system entries, not 257"}
    nul = changed(ENTRY, special("project_roots", "read", ".git\x00x"))
    assert error_for(nul) == {
        "code": -32602, "message": "a sandbox subpath must not contain a NUL byte"}
    glob = changed(ENTRY + ["path"], {"type": "glob_pattern", "pattern": "*\x00"})
    assert error_for(glob) == {
        "code": -32602, "message": "a sandbox pattern must not contain a NUL byte"}
    # As long as a path may be, and no longer: a 48 KB subpath cost seconds of every start.
    longest = changed(ENTRY, special("project_roots", "read", "a" * 4095))
    assert error_for(longest) is None
    long_sub = changed(ENTRY, special("project_roots", "read", "a/" * 24000))
    assert error_for(long_sub) == {
        "code": -32602, "message": "a sandbox subpath is longer than 4095 bytes"}
    long_glob = changed(ENTRY + ["path"], {"type": "glob_pattern", "pattern": "*" * 4096})
    assert error_for(long_glob) == {
        "code": -32602, "message": "a sandbox pattern is longer than 4095 bytes"}


def test_looking_rules_up_costs_the_depth_not_the_count() -> None:
    rules = [PathRule(path=f"/w/d{i}", access="none") for i in range(5000)]
    policy = Policy.of([PathRule(path="/", access="read"), *rules], False)
    narrowed = policy.narrow(policy)  # quadratic before: minutes for this many
    assert narrowed.access("/w/d4999/x") == "none" and narrowed.access("/w/e") == "read"
    assert policy.access("relative/path") == "read"  # no loop on a path that is not absolute
