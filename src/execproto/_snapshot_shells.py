"""Capturing a login shell's state, and replaying it: one script and one replay per shell.

A capture runs the command's own shell as a login shell (``<shell> -lc <capture script>``),
with the command's environment, cwd and sandbox: the profile runs, then the script writes
MARKER, the state as shell source, a NUL, and the exported environment as ``env -0`` gives it.
Anything the profile itself printed comes before the marker and is skipped.

A replay runs ``<shell> <flag> '<startup>; <restore>; <script>'``, where the flag starts the
shell without any startup file (bash ``-p``: no BASH_ENV and no functions from the
environment, turned off again at once; zsh ``-f``; sh reads none without ``-i``). The state
travels in environment variables of at most CHUNK_BYTES each (Linux takes at most 128 KiB in
one), which the restore unsets before it evaluates them, so the command's children never see
them. The reference (0.171) passes it through an inherited pipe where its sandbox allows, and
through such variables elsewhere; variables work under every sandbox.

What is captured, and what a replay restores:

- bash: its options (``shopt -p``, ``set +o``), functions and aliases, after the profile and,
  as the reference does (an interactive shell's state), ``~/.bashrc`` when BASH_ENV is unset;
- zsh: its options (those not at their default), functions and aliases, after the profile and
  ``.zshrc``;
- sh: its options (a POSIX sh cannot list its functions; the reference keeps none either);
- every shell: its exported variables, but those the shell sets itself (PWD, OLDPWD, SHLVL, _).
"""

from __future__ import annotations

import attrs

from ._env import _matches
from ._records import Record
from ._snapshot import LOGIN_FLAG, ShellSnapshot
from .actions import SpawnSpec

MARKER = b"\0execproto-shell-snapshot\0"
# Everything a capture may write (the profile's own output included); past it, it has failed.
MAX_CAPTURE_BYTES = 512 << 10
# A capture that has not ended by then is killed, and has failed.
CAPTURE_SECONDS = 10.0
# A failed capture is tried again by a start at least this long after it, at most
# MAX_ATTEMPTS times in all; meanwhile (and after) the scope's commands run as sent.
RETRY_SECONDS = 1.0
MAX_ATTEMPTS = 3
# Captures kept, least recently used first out (each at most MAX_CAPTURE_BYTES); one session
# keeps at most MAX_SESSION_CACHED, and a full cache gives way from the session holding the
# most, so one client's many scopes never evict the others' captures.
MAX_CACHED = 16
MAX_SESSION_CACHED = 8
CHUNK_BYTES = 60 << 10
STATE_VARIABLE = "__EXECPROTO_SHELL_STATE_"
# Variables a shell sets for itself: the captured values would be stale.
SHELLS_OWN = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
FAILED_RESTORE = "execproto: the shell snapshot could not be restored"

# Each script runs after the login profile. The state is written from a subshell, so what the
# script does there changes nothing it reports; builtins are called as ``\\builtin`` so that
# neither an alias nor a function of the profile's stands in for them.
_START = "\\builtin printf '\\0%s\\0' execproto-shell-snapshot\n"
_ENVIRONMENT = ("\\builtin printf '\\0'\n"
                "env -0\n")

_BASH = (
    'if [ -z "${BASH_ENV-}" ] && [ -n "${HOME-}" ] && [ -r "$HOME/.bashrc" ]; then\n'
    '  . "$HOME/.bashrc"\n'
    "fi\n"
    + _START
    + "(\n"
    "  \\builtin printf 'unalias -a\\n'\n"
    # login_shell and restricted_shell are the shell's to say, not an option to restore.
    "  \\builtin shopt -p | while IFS= \\builtin read -r line; do\n"
    "    case $line in\n"
    "      *' login_shell' | *' restricted_shell') ;;\n"
    "      *) \\builtin printf '%s\\n' \"$line\" ;;\n"
    "    esac\n"
    "  done\n"
    "  \\builtin set +o\n"
    "  \\builtin declare -f\n"
    "  \\builtin alias -p\n"
    "  \\builtin printf ':\\n'\n"
    ")\n"
    + _ENVIRONMENT
)

# zsh's options that describe how it was started, not a choice to restore.
_ZSH_STARTUP_OPTIONS = ("interactive|login|shinstdin|singlecommand|privileged|restricted|zle|"
                        "rcs|norcs")
_ZSH = (
    'if [[ -o rcs ]] && [[ -r "${ZDOTDIR:-${HOME-}}/.zshrc" ]]; then\n'
    '  . "${ZDOTDIR:-${HOME-}}/.zshrc"\n'
    "fi\n"
    + _START
    + "(\n"
    "  \\builtin print -r -- 'unalias -m \"*\"'\n"
    "  \\builtin setopt | while IFS= \\builtin read -r option; do\n"
    "    case $option in\n"
    f"      ({_ZSH_STARTUP_OPTIONS}) ;;\n"
    "      (*) \\builtin print -r -- \"setopt $option\" ;;\n"
    "    esac\n"
    "  done\n"
    "  \\builtin typeset -f\n"
    "  \\builtin alias -L\n"
    "  \\builtin print ':'\n"
    ")\n"
    + _ENVIRONMENT
)

_SH = (
    "printf '\\0%s\\0' execproto-shell-snapshot\n"
    "(\n"
    "  set +o\n"
    "  printf ':\\n'\n"
    ")\n"
    "printf '\\0'\n"
    "env -0\n"
)


@attrs.frozen(repr=False, eq=False)
class Shell(Record):
    capture: str  # the script a capture runs after the profile
    flag: str  # a replay's, in place of -lc
    startup: str  # what a replay runs first, before the restore


SHELLS: dict[str, Shell] = {
    "bash": Shell(capture=_BASH, flag="-pc", startup="set +o privileged\n"),
    "zsh": Shell(capture=_ZSH, flag="-fc", startup="setopt rcs\n"),
    "sh": Shell(capture=_SH, flag="-c", startup=""),
}


@attrs.frozen(kw_only=True, repr=False, eq=False)
class Captured(Record):
    """What a capture gave: the state, as shell source, and the exported environment."""

    state: str
    environment: tuple[tuple[str, str], ...]


def capture_spec(spec: SpawnSpec) -> SpawnSpec:
    """What a capture for ``spec`` runs: its shell as a login shell with the capture script,
    in its cwd, environment and sandbox, without a terminal, stdin or proxy. A sandbox whose
    network is its proxy gets none for the capture: the capture has no proxy of its own."""
    assert spec.snapshot is not None
    sandbox = spec.sandbox
    if spec.proxy is not None and sandbox is not None and sandbox.network:
        sandbox = attrs.evolve(sandbox, network=False)
    return attrs.evolve(
        spec, argv=(spec.argv[0], LOGIN_FLAG, SHELLS[spec.snapshot.shell].capture), tty=False,
        pipe_stdin=False, terminal_size=None, proxy=None, sandbox=sandbox, snapshot=None)


def read_capture(output: bytes) -> Captured | None:
    """The capture's output read, or None if it is not a complete one (no marker, the
    environment cut short, a state that is not UTF-8). An environment entry that is not
    UTF-8, or not ``name=value``, is left out."""
    start = output.find(MARKER)
    if start < 0:
        return None
    state, separator, rest = output[start + len(MARKER):].partition(b"\0")
    if not separator or (rest and not rest.endswith(b"\0")):
        return None
    try:
        text = state.decode("utf-8")
    except UnicodeDecodeError:
        return None
    environment = []
    for entry in rest.split(b"\0"):
        try:
            name, equals, value = entry.decode("utf-8").partition("=")
        except UnicodeDecodeError:
            continue
        if name and equals:
            environment.append((name, value))
    return Captured(state=text, environment=tuple(environment))


def _chunks(state: str) -> list[str]:
    """``state`` in pieces of at most CHUNK_BYTES of UTF-8 each, cut between characters."""
    data = state.encode("utf-8")
    pieces = []
    while data:
        end = min(len(data), CHUNK_BYTES)
        while end < len(data) and data[end] & 0xC0 == 0x80:  # inside a character
            end -= 1
        pieces.append(data[:end].decode("utf-8"))
        data = data[end:]
    return pieces


def _environment(spec: SpawnSpec, snapshot: ShellSnapshot,
                 captured: Captured) -> dict[str, str]:
    """The child's environment: its own, under the captured one (filtered as the start's env
    policy filters), under the values of what the request itself set (``kept``)."""
    own = dict(spec.env)
    result = dict(own)
    for name, value in captured.environment:
        if name in SHELLS_OWN or name.startswith(STATE_VARIABLE):
            continue
        if _matches(name, snapshot.drop) or (snapshot.only and not _matches(name, snapshot.only)):
            continue
        result[name] = value
    for name in snapshot.kept:
        if name in own:
            result[name] = own[name]
    return result


def replay_spec(spec: SpawnSpec, captured: Captured) -> SpawnSpec:
    """``spec`` run from ``captured``: the shell started without its profile, the state
    restored, then the command's own script (and its arguments after it, as sent)."""
    snapshot = spec.snapshot
    assert snapshot is not None
    shell = SHELLS[snapshot.shell]
    env = _environment(spec, snapshot, captured)
    names = []
    for index, piece in enumerate(_chunks(captured.state)):
        name = f"{STATE_VARIABLE}{index}"
        env[name] = piece
        names.append(name)
    restore = ""
    if names:
        values = "".join(f"${{{name}}}" for name in names)
        restore = (f'eval "unset {" ".join(names)}\n{values}" >/dev/null || '
                   f"printf '%s\\n' '{FAILED_RESTORE}' >&2\n")
    script = f"{shell.startup}{restore}{spec.argv[2]}"
    return attrs.evolve(spec, argv=(spec.argv[0], shell.flag, script, *spec.argv[3:]),
                        env=tuple(env.items()), snapshot=None)
