"""The operator's `--path-prepend` directories: announced, and leading the inherited PATH.

The reference names its own directories (its bundled `rg`) as file URIs in `prependPathDirs`, in
the environment info of both `initialize` and `environment/info`, and they (with its
`apply_patch` alias) lead the PATH its processes inherit through an env policy; a PATH in the
request's env stands as given. The Codex CLI sends an env policy and no PATH, and does not
prepend the announced directories itself (probed with 0.171.0).
"""

from __future__ import annotations

from typing import Any

import pytest

from execproto import Config, Host, Spawn

from .harness import Harness

INFO = {"shell": {"name": "bash", "path": "/bin/bash"}, "prependPathDirs": []}


def test_directories_announced_as_uris_in_order() -> None:
    config = Config(path_prepend=["/opt/tools/bin", "/srv/a b"])
    h = Harness(config, Host(environment_info=INFO))
    h.connect()
    init = h.handshake()
    info = h.call(1, "environment/info")["result"]
    wanted = ["file:///opt/tools/bin", "file:///srv/a%20b"]
    assert init["result"]["environmentInfo"]["prependPathDirs"] == wanted
    assert info["prependPathDirs"] == wanted
    assert info["shell"] == INFO["shell"]  # the host's other facts stand
    h.assert_replays()


def test_without_any_the_hosts_empty_list_stands() -> None:
    h = Harness(Config(), Host(environment_info=INFO))
    h.connect()
    assert h.handshake()["result"]["environmentInfo"]["prependPathDirs"] == []


def test_the_server_leaves_path_as_the_request_gives_it() -> None:
    h = Harness(Config(path_prepend=["/opt/tools/bin"]), Host(environment_info=INFO))
    h.connect()
    h.handshake()
    h.start(1, "p", ["true"], env={"PATH": "/usr/bin:/bin"})
    (spawn,) = h.of_type(Spawn)
    assert dict(spawn.spec.env) == {"PATH": "/usr/bin:/bin"}


POLICY = {"inherit": "all", "ignoreDefaultExcludes": False, "exclude": [], "set": {},
          "includeOnly": []}


def spawned_path(config: Config, server_path: str | None, **start: Any) -> str | None:
    env = {} if server_path is None else {"PATH": server_path}
    h = Harness(config, Host(environment_info=INFO, env={"HOME": "/h", **env}))
    h.connect()
    h.handshake()
    h.start(1, "p", ["true"], env={}, **start)
    (spawn,) = h.of_type(Spawn)
    h.assert_replays()  # the trace holds the PATH made here, and its replay makes no other
    return dict(spawn.spec.env).get("PATH")


TOOLS = Config(path_prepend=["/opt/tools/bin", "/opt/more"])


@pytest.mark.parametrize("inherit", ["all", "core"])
def test_the_directories_lead_the_path_a_policy_inherits(inherit: str) -> None:
    policy = {**POLICY, "inherit": inherit}
    wanted = "/opt/tools/bin:/opt/more:/usr/bin:/bin"
    assert spawned_path(TOOLS, "/usr/bin:/bin", envPolicy=policy) == wanted
    assert spawned_path(TOOLS, None, envPolicy=policy) == "/opt/tools/bin:/opt/more"
    assert spawned_path(Config(), "/usr/bin:/bin", envPolicy=policy) == "/usr/bin:/bin"


def test_nothing_inherited_nothing_prepended() -> None:
    assert spawned_path(TOOLS, "/usr/bin", envPolicy={**POLICY, "inherit": "none"}) is None
    assert spawned_path(TOOLS, "/usr/bin") is None  # no policy: exactly the request's env
