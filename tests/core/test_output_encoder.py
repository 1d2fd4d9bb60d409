"""`Config.b64encode`: the core puts output in base64 with the encoder it is given (an adapter
gives pybase64's), in notifications and in read results alike; the stdlib's by default. It is
no setting: configs equal but for it are equal, and a trace neither records nor needs it."""

from __future__ import annotations

import base64
import json

from execproto import Config, Host, Recorder, ServerCore
from execproto._trace import load_header

from .harness import Harness, unb64


def _counting() -> tuple[list[bytes], Config]:
    seen: list[bytes] = []

    def encode(data: bytes) -> bytes:
        seen.append(bytes(data))
        return base64.b64encode(data)

    return seen, Config(b64encode=encode)


def test_output_and_read_results_go_through_the_given_encoder() -> None:
    seen, config = _counting()
    h = Harness(config)
    h.connect(1)
    h.handshake(1)
    proc = h.start(1, "p")
    h.output(proc, "stdout", b"\x00\xffhello")
    h.output(proc, "stderr", b"err")
    assert seen == [b"\x00\xffhello", b"err"]
    chunks = [n["params"]["chunk"] for n in h.notifications(1, "process/output")]
    assert [unb64(c) for c in chunks] == [b"\x00\xffhello", b"err"]
    read = h.call(1, "process/read", {"processId": "p"})["result"]
    assert [unb64(c["chunk"]) for c in read["chunks"]] == [b"\x00\xffhello", b"err"]
    assert seen[2:] == [b"\x00\xffhello", b"err"]
    h.assert_replays()  # the same bytes as the stdlib's: a replay without it agrees


def test_the_default_is_the_stdlibs_standard_padded_base64_without_a_newline() -> None:
    encode = Config().b64encode
    for data in (b"", b"a", b"ab", b"abc", bytes(range(256)) * 3):
        assert encode(data) == base64.b64encode(data)


def test_the_encoder_is_no_setting_and_a_trace_leaves_it_out() -> None:
    _, config = _counting()
    assert config == Config()
    assert "b64encode" not in repr(config)
    lines: list[str] = []
    Recorder(ServerCore(config, Host()), lines.append)
    assert "b64encode" not in json.loads(lines[0])["config"]
    loaded, _ = load_header(lines[0])
    assert loaded == config and loaded.b64encode is Config().b64encode
