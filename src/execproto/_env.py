"""The child's environment, from the request and the server's own environment (passed in).

Without an env policy the child gets exactly the requested ``env``: nothing of the server leaks.
With one, the steps run in a fixed order: inherit, default excludes, excludes, set, include-only,
then the request's ``env`` on top. Name patterns are shell globs, matched case-insensitively.

A terminal's child also gets ``SHELL`` when all that leaves it none, as under the reference
(0.171.0), whose pty library sets the login shell there whatever the policy dropped: a model's
commands on a terminal expect it. A child without a terminal gets exactly what the steps give.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any, Literal

import attrs

from ._records import Record

# The variables a program needs to find its user, its tools, its locale and a temporary
# directory. LANG is here because the reference (0.171.0) keeps it under "core".
CORE_VARS = (
    "HOME",
    "LANG",
    "LOGNAME",
    "PATH",
    "SHELL",
    "USER",
    "USERNAME",
    "TMPDIR",
    "TEMP",
    "TMP",
)
# Names that usually hold credentials; dropped unless the policy says otherwise.
DEFAULT_EXCLUDES = ("*KEY*", "*SECRET*", "*TOKEN*")
# What a policy inherits: CORE_VARS, everything, or nothing.
Inherit = Literal["core", "all", "none"]
# In the reference's order, which its error message lists.
INHERIT_CHOICES: tuple[Inherit, ...] = ("core", "all", "none")


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class EnvPolicy(Record):
    """A ``process/start`` request's ``envPolicy``: what the child takes from the server's
    environment, applied by `child_environment` in the order the module describes."""

    inherit: Inherit = "all"
    ignore_default_excludes: bool = False
    exclude: tuple[str, ...] = ()
    set: tuple[tuple[str, str], ...] = ()
    include_only: tuple[str, ...] = ()


def _matches(name: str, patterns: Iterable[str]) -> bool:
    upper = name.upper()
    return any(fnmatchcase(upper, pattern.upper()) for pattern in patterns)


def login_shell(environment_info: Mapping[str, Any]) -> str | None:
    """The shell the host announces (``environment/info``'s ``shell.path``), if any."""
    shell = environment_info.get("shell")
    path = shell.get("path") if isinstance(shell, Mapping) else None
    return path if isinstance(path, str) and path else None


def child_environment(
    server_env: Mapping[str, str],
    env: Mapping[str, str],
    policy: EnvPolicy | None,
    *,
    terminal_shell: str | None = None,
) -> dict[str, str]:
    """``terminal_shell``: for a child on a terminal, the SHELL it gets if it would have none
    (see the module); None for a child without one."""
    result = _policy_environment(server_env, env, policy)
    if terminal_shell is not None and "SHELL" not in result:
        result["SHELL"] = terminal_shell
    return result


def _policy_environment(
    server_env: Mapping[str, str], env: Mapping[str, str], policy: EnvPolicy | None
) -> dict[str, str]:
    if policy is None:
        return dict(env)
    if policy.inherit == "all":
        result = dict(server_env)
    elif policy.inherit == "core":
        result = {name: server_env[name] for name in CORE_VARS if name in server_env}
    else:
        result = {}
    if not policy.ignore_default_excludes:
        result = {k: v for k, v in result.items() if not _matches(k, DEFAULT_EXCLUDES)}
    if policy.exclude:
        result = {k: v for k, v in result.items() if not _matches(k, policy.exclude)}
    result.update(policy.set)
    if policy.include_only:
        result = {k: v for k, v in result.items() if _matches(k, policy.include_only)}
    result.update(env)
    return result
