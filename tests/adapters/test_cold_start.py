"""What a server's start loads and waits for: nothing of the client or of the other adapters,
and the bubblewrap probe off the critical path (it runs once the server listens), with
everything the start says still said and everything a client is told still true.

The time itself is measured by bench/cold_start.py, not asserted here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .sandboxes import needs_bwrap
from .wsclient import Client

# Modules serving on asyncio must not load: the client, exec, the other event loops.
NOT_FOR_SERVING = (
    "execproto.adapters.client", "execproto.adapters._command._exec",
    "execproto.adapters._client._wsclient", "execproto.adapters._client._client_process",
    "execproto.adapters.trio", "execproto.adapters.threaded", "execproto._clientside._client",
    "execproto._clientside._client_calls",
    "execproto.client_events", "anyio", "trio", "importlib.metadata",
)
# Nor what only some requests need, imported at the first of them: the managed proxy's room,
# its policy, parameters and credential masking, http/request's and forwarding's rooms, their
# handlers, events and actions in the core and forwarding's parameters, a trace's recorder, the
# file calls (their handlers, parsers, requests, events and actions in the core, and the files
# room: the calls, walks, watches, confinement), the host's skills, TOML
# (environmentConfig/read), fs/copy and the shell snapshots' room and parser; nor `uuid` (a
# session's id is made from os.urandom).
NOT_UNTIL_ASKED = (
    "execproto.adapters._proxy._room", "execproto._netproxy", "execproto._netproxy_params",
    "execproto._credentials", "execproto.adapters._proxy._masking", "execproto._snapshot",
    "execproto.adapters._http._http_calls",
    "execproto.adapters._forward._streams", "execproto._forward_params", "execproto._forwards",
    "execproto._forward_stream", "execproto._forward_events", "execproto._forward_actions",
    "execproto._http_service", "execproto._http_events", "execproto._http_actions",
    "execproto._trace",
    "execproto.fs", "execproto._fs_params", "execproto._fs_service", "execproto._watches",
    "execproto._fs_events", "execproto._fs_actions", "execproto.adapters._files._fs_calls",
    "execproto.adapters._files._calls", "execproto.adapters._files._walk",
    "execproto.adapters._files._watch", "execproto.adapters._files._beneath",
    "execproto.adapters._files._opening", "execproto.adapters._files._caps",
    "execproto.adapters._files._view",
    "execproto.adapters._files._skills", "execproto.adapters._files._copy", "tomllib",
    "execproto.adapters._processes._snapshots", "uuid",
)
# serve on stdio with stdin at its end: it starts, answers nothing, and stops.
SERVE_AND_LIST = (
    "import json, sys\n"
    "from execproto.adapters import cli\n"
    "status = cli.main(['serve', '--listen', 'stdio', '--log-level', 'warning'])\n"
    "print(json.dumps([status, sorted(sys.modules)]))\n"
)


def test_serving_loads_nothing_of_the_client_or_the_other_adapters() -> None:
    done = subprocess.run([sys.executable, "-c", SERVE_AND_LIST], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    status, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == 0, done.stderr
    assert "execproto.adapters.asyncio" in loaded  # it did serve
    assert [name for name in NOT_FOR_SERVING if name in loaded] == []
    assert [name for name in NOT_UNTIL_ASKED if name in loaded] == []


# What the start itself need not load, where a module's own import is dear: shutil and tempfile
# (bz2, lzma, random: programs are found by `_system.which`), pathlib (FILE arguments are
# converted where given), ctypes, the policy's links and globs, the ELF reader, and the
# sandbox's own modules, which load when the probe of bubblewrap runs once the server listens,
# or at the first sandboxed start. Listed as they stand when the server prints its address:
# the probe may load them any moment after.
NOT_AT_START = (
    "shutil", "tempfile", "random", "bz2", "lzma", "pathlib", "ctypes", "termios", "shlex", "hmac",
    "execproto.policy", "execproto._links", "execproto._globs",
    "execproto.adapters._command._loaded", "execproto.adapters._files._beneath",
    "execproto.adapters._processes._bwrap", "execproto.adapters._processes._stage",
    "execproto.adapters._processes._forker", "execproto.adapters._processes._hold",
    "execproto.adapters._processes._zygote", "execproto.adapters._processes._seccomp",
)
# (What the interpreter loaded before, the editable install's finder pathlib among them, is
# not the start's.)
LISTEN_AND_LIST = (
    "import builtins, json, os, sys\n"
    "before = set(sys.modules)\n"
    "from execproto.adapters import cli\n"
    "def said(*args, **kwargs):\n"
    "    if args and str(args[0]).startswith('ws://'):\n"
    "        loaded = sorted(set(sys.modules) - before)\n"
    "        sys.stdout.write(json.dumps(loaded) + '\\n'); sys.stdout.flush()\n"
    "        os._exit(0)\n"
    "builtins.print = said\n"
    "cli.main(['serve', '--listen', 'ws://127.0.0.1:0', '--log-level', 'warning'])\n"
)


def test_listening_loads_nothing_a_start_need_not() -> None:
    done = subprocess.run([sys.executable, "-c", LISTEN_AND_LIST], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert "execproto.adapters.asyncio" in loaded  # it did listen
    assert [name for name in NOT_AT_START if name in loaded] == []


# attrs reads each converter's signature: a builtin's is parsed from its text by `tokenize`,
# whose regular expressions take ~5 ms to compile. No class of a start may have one.
SERVE_THEN_TOKENIZE = (
    "import sys, tokenize\n"
    "from execproto.adapters import cli\n"
    "status = cli.main(['serve', '--listen', 'stdio', '--log-level', 'warning'])\n"
    "print(status, tokenize._compile.cache_info().currsize)\n"
)


def test_serving_compiles_no_tokenizer() -> None:
    done = subprocess.run([sys.executable, "-c", SERVE_THEN_TOKENIZE], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["0", "0"], done.stderr


# Through the console script's entry, which stops the cyclic collector for the start.
SERVE_THEN_COLLECTOR = (
    "import gc, sys\n"
    "from execproto.adapters import _entry\n"
    "sys.argv = ['execproto', 'serve', '--listen', 'stdio', '--log-level', 'warning']\n"
    "status = _entry.main()\n"
    "print(status, gc.isenabled(), gc.get_freeze_count() > 0)\n"
)


def test_the_collector_runs_again_once_serving_with_the_start_frozen_out_of_it() -> None:
    done = subprocess.run([sys.executable, "-c", SERVE_THEN_COLLECTOR], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["0", "True", "True"], done.stderr


def serve_briefly(*args: str, env: dict[str, str] | None = None,
                  cwd: Path | None = None) -> tuple[str, str]:
    """stdout's first line and all of stderr, of a server stopped once it is listening."""
    server = subprocess.Popen([sys.executable, "-m", "execproto", "serve", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **(env or {})}, cwd=cwd)
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    return first, err


def test_without_bubblewrap_the_start_still_warns_before_it_listens(tmp_path: Path) -> None:
    # No bwrap on PATH: the probe (on its thread) finds none, and the warning comes first.
    first, err = serve_briefly("--listen", "ws://127.0.0.1:0", env={"PATH": str(tmp_path)})
    assert first.startswith("ws://127.0.0.1:"), err
    warned = err.find("no sandbox can be enforced here (bubblewrap (bwrap) is not installed)")
    assert 0 <= warned < err.find("listening on"), err


def test_a_backend_of_the_operators_gets_no_warning_of_the_default_ones(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(
        "from execproto.adapters.backends import LocalBackend\n"
        "def make():\n    return LocalBackend(bwrap=None)\n")
    first, err = serve_briefly("--backend", "mine:make", cwd=tmp_path)
    assert first.startswith("ws://127.0.0.1:"), err
    assert "no sandbox can be enforced" not in err, err


def test_sandbox_bwrap_without_bubblewrap_still_stops_the_start(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "execproto", "serve", "--sandbox", "bwrap"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": str(tmp_path)})
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert "needs bubblewrap" in done.stderr


@needs_bwrap
def test_the_first_client_is_told_what_the_probe_found_and_the_log_says_it_after(
        tmp_path: Path) -> None:
    # A bubblewrap whose every run (the probe's too) takes a second: the first client, connected
    # the moment the address is printed, sends initialize while the probe still runs. Its
    # answer waits, and announces the managed proxy, which needs bubblewrap.
    slow = tmp_path / "bwrap"
    slow.write_text(f"#!/bin/sh\nsleep 1\nexec {shutil.which('bwrap')} \"$@\"\n")
    slow.chmod(0o755)
    server = subprocess.Popen([sys.executable, "-m", "execproto", "serve"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    try:
        assert server.stdout is not None
        client = Client(server.stdout.readline().strip())
        reply = client.handshake()
        client.close()
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    capabilities = reply["result"]["environmentInfo"]["capabilities"]
    assert capabilities["networkProxyLaunch"] is True, reply
    assert capabilities["networkProxyReviewDomains"] is True, reply
    listening, sandbox = err.find("listening on"), err.find(f"sandbox: bubblewrap ({slow})")
    assert 0 <= listening < sandbox, err
