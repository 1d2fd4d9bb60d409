"""``shellSnapshot`` in the core: its errors (the reference's, measured), when it applies, what
one capture serves (the key), and the pure half of a capture and a replay."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from execproto import Config, Policy, Spawn, SpawnSpec
from execproto.netproxy import ProxyConfig
from execproto.policy import PathRule
from execproto.snapshot import Captured, ShellSnapshot, capture_spec, read_capture, replay_spec

from .harness import CWD, Harness

BASH = {"name": "bash", "path": "/bin/bash"}
LOGIN = ["/bin/bash", "-lc", "echo hi"]

# Measured on the reference (0.171): what each shellSnapshot gets, for a login argv.
ERRORS = [
    ({"shell": BASH}, "missing field `scopeId`"),
    ({"scopeId": "s"}, "missing field `shell`"),
    ({}, "missing field `scopeId`"),
    ({"scopeId": 5, "shell": BASH}, "invalid type: number, expected a string"),
    ({"scopeId": None, "shell": BASH}, "invalid type: null, expected a string"),
    ({"scopeId": "s", "shell": {"path": "/bin/bash"}}, "missing field `name`"),
    ({"scopeId": "s", "shell": {"name": "bash"}}, "missing field `path`"),
    ({"scopeId": "s", "shell": None}, "invalid type: null, expected struct ShellInfo"),
    ({"scopeId": "s", "shell": "bash"}, 'invalid type: string "bash", expected struct ShellInfo'),
    ({"scopeId": "s", "shell": {"name": 1, "path": "p"}},
     "invalid type: number, expected a string"),
    ({"scopeId": "s", "shell": []}, "invalid length 0, expected struct ShellInfo with 2 elements"),
    ({"scopeId": "", "shell": {"name": "fish"}}, "missing field `path`"),
    ("x", 'invalid type: string "x", expected struct ShellSnapshotRequest'),
    (5, "invalid type: number, expected struct ShellSnapshotRequest"),
    ([], "invalid length 0, expected struct ShellSnapshotRequest with 2 elements"),
    (["s"], "invalid length 1, expected struct ShellSnapshotRequest with 2 elements"),
    (["s", BASH, 1], "invalid length 3, expected fewer elements in array"),
    (["s", ["bash"]], "invalid length 1, expected struct ShellInfo with 2 elements"),
    ([5], "invalid type: number, expected a string"),
    ({"scopeId": "", "shell": BASH},
     "shell snapshot scope must be non-empty and at most 256 bytes"),
    ({"scopeId": "x" * 257, "shell": BASH},
     "shell snapshot scope must be non-empty and at most 256 bytes"),
    ({"scopeId": "é" * 129, "shell": BASH},  # 258 bytes
     "shell snapshot scope must be non-empty and at most 256 bytes"),
    ({"scopeId": "s", "shell": {"name": "fish", "path": "/bin/bash"}},
     "shell snapshots are unsupported for shell `fish`"),
    ({"scopeId": "s", "shell": {"name": "Bash", "path": "/bin/bash"}},
     "shell snapshots are unsupported for shell `Bash`"),
]


def started(h: Harness, process_id: str, snapshot: Any, argv: list[str] | None = None,
            conn: int = 1, **extra: Any) -> SpawnSpec:
    h.start(conn, process_id, argv or LOGIN, shellSnapshot=snapshot, **extra)
    spec: SpawnSpec = h.of_type(Spawn)[-1].spec
    return spec


def session() -> Harness:
    h = Harness(Config(sandbox_type="linuxSeccomp"))
    h.connect()
    h.handshake()
    return h


@pytest.mark.parametrize(("snapshot", "message"), ERRORS)
def test_errors_are_the_reference_s(snapshot: Any, message: str) -> None:
    h = session()
    params = {"processId": "p", "argv": LOGIN, "cwd": CWD, "env": {}, "tty": False,
              "shellSnapshot": snapshot}
    assert h.call(1, "process/start", params)["error"] == {"code": -32602, "message": message}
    assert h.of_type(Spawn) == []


def test_the_shell_is_judged_before_the_process_id() -> None:
    h = session()
    h.start(1, "p")
    params = {"processId": "p", "argv": LOGIN, "cwd": CWD, "env": {}, "tty": False,
              "shellSnapshot": {"scopeId": "s", "shell": {"name": "fish", "path": "/bin/bash"}}}
    assert h.call(1, "process/start", params)["error"]["message"] == (
        "shell snapshots are unsupported for shell `fish`")


@pytest.mark.parametrize("argv", [
    ["/bin/bash", "-c", "echo hi"],  # not a login shell
    ["bash", "-lc", "echo hi"],  # not the shell's path
    ["/bin/bash", "-lc"],  # no script
    ["/bin/sh", "-lc", "echo hi"],
])
def test_a_command_it_does_not_apply_to_runs_as_sent(argv: list[str]) -> None:
    h = session()
    # Not applying, even an unknown shell is no error; a scope out of bounds always is.
    spec = started(h, "p", {"scopeId": "s", "shell": {"name": "fish", "path": "/bin/bash"}},
                   argv)
    assert spec.snapshot is None and spec.argv == tuple(argv)
    params = {"processId": "q", "argv": argv, "cwd": CWD, "env": {}, "tty": False,
              "shellSnapshot": {"scopeId": "", "shell": {"name": "fish", "path": "x"}}}
    assert h.call(1, "process/start", params)["error"]["message"] == (
        "shell snapshot scope must be non-empty and at most 256 bytes")


@pytest.mark.parametrize("snapshot", [
    None,
    {"scopeId": "x" * 256, "shell": BASH},
    {"scopeId": "s", "shell": BASH, "extra": 1},
    {"scopeId": "s", "shell": {**BASH, "extra": 1}},
    ["s", ["bash", "/bin/bash"]],
    ["s", BASH],
])
def test_accepted(snapshot: Any) -> None:
    spec = started(session(), "p", snapshot)
    assert (spec.snapshot is None) == (snapshot is None)
    assert spec.argv == tuple(LOGIN)  # the core never rewrites the command: the adapter does


POLICY = {"inherit": "none", "ignoreDefaultExcludes": False, "exclude": ["AWS_*"],
          "set": {"SECRET_SET": "hunter2"}, "includeOnly": []}


def test_the_key_is_what_one_capture_serves() -> None:
    h = session()
    scope = {"scopeId": "t:remote", "shell": BASH}
    base = started(h, "a", scope).snapshot
    assert base is not None and base.shell == "bash"
    # The env a request sends is not part of it (the reference's key neither).
    assert started(h, "b", scope, env={"X": "1"}).snapshot == attrs.evolve(base, kept=("X",))
    others = [
        started(h, "c", {"scopeId": "t2:remote", "shell": BASH}),
        started(h, "d", scope, cwd="file:///"),
        started(h, "e", scope, envPolicy=POLICY),
        started(h, "f", scope, sandbox={
            "permissions": {"type": "managed", "network": "restricted", "file_system": {
                "type": "restricted",
                "entries": [{"path": {"type": "special", "value": {"kind": "root"}},
                             "access": "read"}]}},
            "windowsSandboxLevel": "disabled", "windowsSandboxProxySettingsMode": "reconcile",
            "useLegacyLandlock": False}),
    ]
    h.connect(2)
    h.handshake(2)
    others.append(started(h, "g", scope, conn=2))  # another session
    keys = {base.key} | {spec.snapshot.key for spec in others if spec.snapshot is not None}
    assert len(keys) == 6
    # What the policy says about the captured environment rides along; its values do not.
    policy = others[2].snapshot
    assert policy is not None
    assert policy.drop == ("*KEY*", "*SECRET*", "*TOKEN*", "AWS_*") and policy.kept == (
        "SECRET_SET",)
    assert "hunter2" not in json.dumps(attrs.asdict(policy))
    h.assert_replays()  # a trace with snapshots replays


def spec_of(shell: str = "bash", argv: tuple[str, ...] = ("/bin/bash", "-lc", "echo hi"),
            **snapshot: Any) -> SpawnSpec:
    return SpawnSpec(argv=argv, arg0=None, cwd="/w", tty=True, pipe_stdin=True,
                     env=(("PATH", "/bin"), ("HOME", "/h"), ("MINE", "request")),
                     session_id="s", process_id="p", terminal_size=(30, 100),
                     snapshot=ShellSnapshot(key="k", shell=shell, **snapshot))


def test_a_capture_runs_the_login_shell_without_terminal_or_stdin() -> None:
    spec = spec_of()
    capture = capture_spec(spec)
    assert capture.argv[:2] == ("/bin/bash", "-lc")
    assert "execproto-shell-snapshot" in capture.argv[2]
    assert (capture.tty, capture.pipe_stdin, capture.terminal_size, capture.snapshot) == (
        False, False, None, None)
    assert (capture.env, capture.cwd, capture.sandbox) == (spec.env, spec.cwd, None)
    # A sandbox whose network is its proxy: the capture has no proxy, so no network at all.
    sandbox = Policy.of([PathRule(path="/", access="read")], network=True)
    proxied = attrs.evolve(spec, sandbox=sandbox, proxy=ProxyConfig())
    assert capture_spec(proxied).sandbox == attrs.evolve(sandbox, network=False)
    assert capture_spec(proxied).proxy is None
    assert capture_spec(attrs.evolve(spec, sandbox=sandbox)).sandbox == sandbox


MARKER = b"\0execproto-shell-snapshot\0"


@pytest.mark.parametrize(("output", "expected"), [
    (b"", None),
    (b"welcome\n" + MARKER + b"f() { :; }\n\0A=1\0B=x=y\0", Captured(
        state="f() { :; }\n", environment=(("A", "1"), ("B", "x=y")))),
    (MARKER + b"state\0", Captured(state="state", environment=())),
    (MARKER + b"state", None),  # no environment: cut short
    (MARKER + b"state\0A=1\0B=", None),  # an entry cut short
    (MARKER + b"\xff\0A=1\0", None),  # a state that is not UTF-8
    (MARKER + b"s\0A=\xff\0=x\0noequals\0B=2\0", Captured(state="s", environment=(("B", "2"),))),
])
def test_reading_a_capture(output: bytes, expected: Captured | None) -> None:
    assert read_capture(output) == expected


def test_a_replay_restores_without_the_profile() -> None:
    captured = Captured(state="greet() { echo hi; }\n", environment=(
        ("FROM_PROFILE", "1"), ("MINE", "profile"), ("HOME", "/profile-home"), ("PWD", "/old"),
        ("SHLVL", "1"), ("_", "/usr/bin/env"), ("__EXECPROTO_SHELL_STATE_0", "x")))
    spec = spec_of(argv=("/bin/bash", "-lc", "greet", "zero", "one"), kept=("MINE",))
    replay = replay_spec(spec, captured)
    env = dict(replay.env)
    assert env == {"PATH": "/bin", "HOME": "/profile-home", "MINE": "request",
                   "FROM_PROFILE": "1", "__EXECPROTO_SHELL_STATE_0": captured.state}
    program, flag, script, *rest = replay.argv
    assert (program, flag, rest) == ("/bin/bash", "-pc", ["zero", "one"])
    assert script.startswith("set +o privileged\neval \"unset __EXECPROTO_SHELL_STATE_0\n")
    assert script.endswith("\ngreet")
    assert replay.snapshot is None and (replay.tty, replay.terminal_size) == (True, (30, 100))


@pytest.mark.parametrize(("shell", "flag", "startup"), [
    ("bash", "-pc", "set +o privileged\n"), ("zsh", "-fc", "setopt rcs\n"), ("sh", "-c", "")])
def test_each_shell_starts_without_its_startup_files(shell: str, flag: str, startup: str) -> None:
    replay = replay_spec(spec_of(shell), Captured(state=":\n", environment=()))
    assert replay.argv[1] == flag and replay.argv[2].startswith(startup + "eval ")


def test_the_policy_filters_what_the_profile_exported() -> None:
    captured = Captured(state=":\n", environment=(
        ("GITHUB_TOKEN", "t"), ("AWS_REGION", "r"), ("LANG", "C"), ("EDITOR", "vi")))
    dropped = replay_spec(spec_of(drop=("*TOKEN*", "AWS_*")), captured)
    assert {"GITHUB_TOKEN", "AWS_REGION"}.isdisjoint(dict(dropped.env))
    only = replay_spec(spec_of(only=("LANG",)), captured)
    assert "LANG" in dict(only.env) and "EDITOR" not in dict(only.env)


def test_a_large_state_is_cut_in_pieces_between_characters() -> None:
    state = "é" * 100_000  # 200,000 bytes: four pieces, none over 60 KiB
    env = dict(replay_spec(spec_of(), Captured(state=state, environment=())).env)
    pieces = [env[f"__EXECPROTO_SHELL_STATE_{n}"] for n in range(4)]
    assert "__EXECPROTO_SHELL_STATE_4" not in env
    assert "".join(pieces) == state
    assert all(len(piece.encode()) <= 60 << 10 for piece in pieces)
