"""Strings the OS refuses, sent to a live server: each is answered, and the server lives on.

Before they were checked at the door, one NUL in argv made subprocess raise ValueError inside
the adapter: trio and threads died with every session, asyncio left the id taken forever.
"""

from __future__ import annotations

from .conftest import start
from .wsclient import Client, output_of

BAD = [
    (["echo", "a\x00b"], {}),
    (["echo"], {"arg0": "x\x00"}),
    (["echo"], {"env": {"A": "x\x00y"}}),
    (["echo"], {"env": {"A=B": "x"}}),
]


def test_strings_the_os_refuses_never_reach_a_spawn(client: Client) -> None:
    for index, (argv, extra) in enumerate(BAD):
        reply = start(client, f"bad-{index}", argv, **extra)
        assert reply["error"]["code"] == -32602, reply  # type: ignore[index]
    # A lone surrogate cannot even be decoded: the frame is no message, as for the reference.
    client.send_raw('{"id": 99, "method": "process/start", "params": {"processId": "s", '
                    '"argv": ["echo", "\\ud800"], "cwd": "file:///", "env": {}, "tty": false}}')
    assert client.recv()["id"] == -1
    reply = start(client, "bad-0", ["echo", "alive"])  # the id is free, the server alive
    assert "result" in reply, reply
    assert output_of(client.events_until_closed("bad-0")) == {"stdout": b"alive\n"}
