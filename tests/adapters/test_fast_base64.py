"""Output in base64 through pybase64 when it can be imported, the stdlib's when not: the same
bytes either way (`_serving._base64`, `Config.b64encode`)."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pybase64
import pytest

from execproto import Config
from execproto.adapters._serving import _base64
from execproto.adapters._serving._serve import make_core

from .conftest import Server, start
from .wsclient import output_of

STDLIB = Config().b64encode


def test_the_adapter_gives_the_core_pybase64s_encoder() -> None:
    assert _base64.fast_encoder() is pybase64.b64encode
    core, _ = make_core(None, None)
    assert core.config.b64encode is pybase64.b64encode  # type: ignore[union-attr]


def test_without_pybase64_the_stdlibs_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pybase64", None)  # import pybase64: ImportError
    assert _base64.fast_encoder() is None
    assert _base64.with_fast_base64(Config()).b64encode is STDLIB


def test_an_embedders_own_encoder_is_kept() -> None:
    def own(data: bytes) -> bytes:
        return base64.b64encode(data)

    assert _base64.with_fast_base64(Config(b64encode=own)).b64encode is own


@pytest.mark.parametrize("fast", [True, False], ids=["pybase64", "stdlib"])
def test_a_stream_arrives_exact_with_either_encoder(tmp_path: Path, fast: bool) -> None:
    env = {}
    if not fast:  # a pybase64 that cannot be imported, ahead of the real one
        blocked = tmp_path / "pybase64"
        blocked.mkdir()
        (blocked / "__init__.py").write_text("raise ImportError('not here')\n")
        env["PYTHONPATH"] = f"{tmp_path}:{':'.join(sys.path)}"
    server = Server("asyncio", env=env)
    try:
        client = server.client()
        # Every byte value, at lengths that leave each padding (0, 1 and 2 bytes over).
        data = bytes(range(256)) * 4096 + b"xy"
        source = tmp_path / "data"
        source.write_bytes(data)
        start(client, "s", ["cat", str(source)])
        assert output_of(client.events_until_closed("s", timeout=60)) == {"stdout": data}
        client.close()
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
