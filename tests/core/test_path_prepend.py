"""The operator's `--path-prepend` directories, announced as `prependPathDirs`.

The reference names its own directories there (its bundled `rg`) as file URIs in the
environment info of both `initialize` and `environment/info`; the client puts them at the front
of PATH for the commands it runs. The server leaves a process's PATH as the request gives it.
"""

from __future__ import annotations

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
