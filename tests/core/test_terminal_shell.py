"""A terminal's child gets SHELL when its environment would have none, as under the reference.

Probed against codex 0.171.0 (server SHELL=/bin/fakesh, login shell /bin/bash): on a terminal
the child saw SHELL=/bin/bash with no policy, with `inherit: none`, with `includeOnly: [HOME]`
and with `exclude: [SHELL]`; a SHELL in the request's env won; without a terminal
`includeOnly: [HOME]` left HOME alone. (The reference takes the login shell from the password
database; execproto takes the shell the host announces.)
"""

from __future__ import annotations

import pytest

from execproto import EnvPolicy, child_environment
from execproto._env import login_shell

SERVER = {"HOME": "/home/u", "SHELL": "/bin/zsh", "PATH": "/usr/bin"}
CASES = [
    (None, {}),
    (EnvPolicy(inherit="none"), {}),
    (EnvPolicy(include_only=("HOME",)), {"HOME": "/home/u"}),
    (EnvPolicy(exclude=("SHELL",)), {"HOME": "/home/u", "PATH": "/usr/bin"}),
]


@pytest.mark.parametrize(("policy", "rest"), CASES)
def test_a_terminal_gets_the_shell_the_policy_dropped(policy: EnvPolicy | None,
                                                      rest: dict[str, str]) -> None:
    got = child_environment(SERVER, {}, policy, terminal_shell="/bin/bash")
    assert got == {**rest, "SHELL": "/bin/bash"}


@pytest.mark.parametrize(("policy", "rest"), CASES)
def test_without_a_terminal_the_policy_stands(policy: EnvPolicy | None,
                                              rest: dict[str, str]) -> None:
    assert child_environment(SERVER, {}, policy) == rest


def test_a_shell_the_child_has_wins() -> None:
    asked = child_environment(SERVER, {"SHELL": "/bin/given"}, EnvPolicy(include_only=("HOME",)),
                              terminal_shell="/bin/bash")
    assert asked["SHELL"] == "/bin/given"
    inherited = child_environment(SERVER, {}, EnvPolicy(), terminal_shell="/bin/bash")
    assert inherited["SHELL"] == "/bin/zsh"


def test_login_shell_from_the_environment_info() -> None:
    assert login_shell({"shell": {"name": "bash", "path": "/bin/bash"}}) == "/bin/bash"
    assert login_shell({}) is None
    assert login_shell({"shell": {"name": "x", "path": ""}}) is None
