"""The core's pure parts, each alone: env policy, file: URIs, the output log, timers, encoders."""

from __future__ import annotations

import json
import sys
from collections.abc import Hashable
from typing import Any

import pytest

from execproto import (
    Config,
    EnvPolicy,
    Host,
    RpcError,
    Spawn,
    child_environment,
    path_from_uri,
    uri_from_path,
)
from execproto._env import CORE_VARS, DEFAULT_EXCLUDES
from execproto._errors import internal_error, invalid_params, invalid_request
from execproto._jsonrpc import (
    ClientResponse,
    Incoming,
    Malformed,
    describe,
    encode_output,
    output_prefix,
    parse,
)
from execproto._output import Chunk, OutputLog
from execproto._params import Fields
from execproto._paths import cwd_from_uri
from execproto._process import exit_code_of
from execproto._timers import Timers

from .harness import CWD, Harness, b64

# -- expected messages (the one place to update when the core's wording changes) ----------------

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
RELATIVE_URI = "invalid URI: relative URL without a base"


def unsupported_scheme(scheme: str) -> str:
    return f"unsupported path URI scheme `{scheme}`"


def foreign_path(uri: str) -> str:
    return f"'{uri}' is invalid on 'linux'"


def foreign_cwd(uri: str) -> str:
    return f"cwd URI `{uri}` is not valid on this exec-server host: '{uri}' is invalid on 'linux'"


# -- child_environment --------------------------------------------------------------------------

SERVER_ENV = {
    "HOME": "/home/srv",
    "PATH": "/usr/bin:/bin",
    "USER": "srv",
    "TMPDIR": "/tmp/srv",
    "LANG": "C.UTF-8",
    "LC_ALL": "C",
    "http_proxy": "http://proxy:3128",
    "HTTPS_PROXY": "http://proxy:3128",
    "API_KEY": "k",
    "aws_secret_access_key": "s",
    "GitHubToken": "t",
    "MONKEY": "contains key",
    "TERM": "xterm",
}
CREDENTIALS = {"API_KEY", "aws_secret_access_key", "GitHubToken", "MONKEY"}


def test_without_a_policy_the_child_gets_exactly_env() -> None:
    env = {"A": "1", "API_KEY": "mine"}
    result = child_environment(SERVER_ENV, env, None)
    assert result == env
    assert result is not env
    assert child_environment(SERVER_ENV, {}, None) == {}


def test_inherit_all_drops_the_default_excludes_case_insensitively() -> None:
    result = child_environment(SERVER_ENV, {}, EnvPolicy())
    assert result == {k: v for k, v in SERVER_ENV.items() if k not in CREDENTIALS}


def test_inherit_core_keeps_only_core_variables_the_server_has() -> None:
    result = child_environment(SERVER_ENV, {}, EnvPolicy(inherit="core"))
    assert result == {"HOME": "/home/srv", "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin",
                      "USER": "srv", "TMPDIR": "/tmp/srv"}
    assert set(result) <= set(CORE_VARS)
    everything = {name: name.lower() for name in CORE_VARS} | {"OTHER": "x"}
    assert child_environment(everything, {}, EnvPolicy(inherit="core")) == {
        name: name.lower() for name in CORE_VARS
    }


def test_inherit_none_starts_empty() -> None:
    assert child_environment(SERVER_ENV, {}, EnvPolicy(inherit="none")) == {}
    assert child_environment(SERVER_ENV, {"A": "1"}, EnvPolicy(inherit="none")) == {"A": "1"}


@pytest.mark.parametrize(
    "name",
    ["API_KEY", "api_key", "KEY", "key", "Keyboard", "MY_SECRET", "secret_x", "SeCrEt",
     "TOKEN", "github_token", "tokenizer", "PASSKEYS"],
)
def test_default_excludes_match_anywhere_in_the_name(name: str) -> None:
    assert child_environment({name: "v", "KEEP": "1"}, {}, EnvPolicy()) == {"KEEP": "1"}
    policy = EnvPolicy(ignore_default_excludes=True)
    assert child_environment({name: "v"}, {}, policy) == {name: "v"}


def test_default_excludes_are_the_documented_ones() -> None:
    assert DEFAULT_EXCLUDES == ("*KEY*", "*SECRET*", "*TOKEN*")


def test_ignore_default_excludes_keeps_credentials() -> None:
    result = child_environment(SERVER_ENV, {}, EnvPolicy(ignore_default_excludes=True))
    assert result == SERVER_ENV


def test_exclude_globs_are_case_insensitive_and_match_whole_names() -> None:
    policy = EnvPolicy(exclude=("*_proxy", "lc_*", "LAN?", "TER"), ignore_default_excludes=True)
    result = child_environment(SERVER_ENV, {}, policy)
    assert "http_proxy" not in result and "HTTPS_PROXY" not in result
    assert "LC_ALL" not in result and "LANG" not in result
    assert result["TERM"] == "xterm"  # "TER" is a whole-name pattern, not a prefix
    assert set(result) == set(SERVER_ENV) - {"http_proxy", "HTTPS_PROXY", "LC_ALL", "LANG"}


def test_exclude_character_classes() -> None:
    policy = EnvPolicy(inherit="all", exclude=("[AB]*",))
    assert child_environment({"ALPHA": "1", "BETA": "2", "GAMMA": "3"}, {}, policy) == {
        "GAMMA": "3"
    }


def test_set_comes_after_excludes_and_overrides_inherited_values() -> None:
    policy = EnvPolicy(exclude=("PATH",), set=(("PATH", "/opt/bin"), ("API_KEY", "given"),
                                                ("HOME", "/elsewhere")))
    result = child_environment(SERVER_ENV, {}, policy)
    assert result["PATH"] == "/opt/bin"
    assert result["API_KEY"] == "given"  # set deliberately, so not a default exclude
    assert result["HOME"] == "/elsewhere"


def test_include_only_keeps_matching_names_including_set_ones() -> None:
    policy = EnvPolicy(include_only=("PATH", "home", "X_*"), set=(("X_A", "1"), ("Y", "2")))
    result = child_environment(SERVER_ENV, {}, policy)
    assert result == {"HOME": "/home/srv", "PATH": "/usr/bin:/bin", "X_A": "1"}


def test_include_only_does_not_bring_back_excluded_names() -> None:
    policy = EnvPolicy(include_only=("*KEY*", "PATH"))
    assert child_environment(SERVER_ENV, {}, policy) == {"PATH": "/usr/bin:/bin"}


def test_env_overlays_last_over_everything() -> None:
    policy = EnvPolicy(
        inherit="core",
        exclude=("HOME",),
        set=(("PATH", "/set"), ("S", "set")),
        include_only=("PATH",),
    )
    env = {"HOME": "/req", "PATH": "/req/bin", "API_KEY": "req", "NEW": "n"}
    assert child_environment(SERVER_ENV, env, policy) == env


def test_empty_policy_lists_change_nothing() -> None:
    policy = EnvPolicy(inherit="all", exclude=(), set=(), include_only=())
    assert child_environment({"A": "1"}, {}, policy) == {"A": "1"}


def test_the_policy_reaches_the_spawn_spec_through_process_start() -> None:
    h = Harness(host=Host(env=dict(SERVER_ENV)))
    h.connect(1)
    h.handshake(1)
    policy = {"inherit": "core", "exclude": ["tmp*", "lang"], "set": {"S": "s", "API_KEY": "k"},
              "includeOnly": ["*"], "ignoreDefaultExcludes": False}
    params = {"processId": "p", "argv": ["env"], "cwd": CWD, "tty": False, "env": {"REQ": "r"},
              "envPolicy": policy}
    h.request(1, "process/start", params)
    h.request(1, "process/start", {**params, "processId": "q", "envPolicy": None})
    default = {"inherit": "all", "exclude": [], "set": {}, "includeOnly": [],
               "ignoreDefaultExcludes": False}
    h.request(1, "process/start", {**params, "processId": "r", "envPolicy": default})
    policy_spec, plain_spec, default_spec = (s.spec for s in h.of_type(Spawn))
    assert dict(policy_spec.env) == {"HOME": "/home/srv", "PATH": "/usr/bin:/bin", "USER": "srv",
                                     "S": "s", "API_KEY": "k", "REQ": "r"}
    assert dict(plain_spec.env) == {"REQ": "r"}
    assert dict(default_spec.env) == {
        **{k: v for k, v in SERVER_ENV.items() if k not in CREDENTIALS}, "REQ": "r"
    }
    # The spec carries the rest of the request as given.
    assert policy_spec.argv == ("env",) and policy_spec.cwd == "/tmp" and policy_spec.tty is False


# -- file: URIs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri, path",
    [
        ("file:///tmp/a%20b", "/tmp/a b"),
        ("file:///tmp/a b", "/tmp/a b"),
        ("file:///", "/"),
        ("file:/tmp/x", "/tmp/x"),
        ("file:tmp", "/tmp"),  # the URL parser's reading, as in the reference
        ("file://", "/"),
        ("FILE:///tmp", "/tmp"),
        ("file://localhost/tmp", "/tmp"),
        ("file://LocalHost/tmp", "/tmp"),
        ("file:///%41%62", "/Ab"),
        ("file:///a%25b", "/a%b"),
        ("file:///a%2Fb", "/a/b"),
        ("file:///%E2%9C%93", "/✓"),
        ("file:///✓", "/✓"),
        ("file:///tmp/%FF%FE", "/tmp/\udcff\udcfe"),
        ("file:////server/share", "//server/share"),
        ("file:///C/x", "/C/x"),  # not a drive: no colon
        # A query or fragment is not part of the path (as a URL parser reads it).
        ("file:///x?", "/x"),
        ("file:///tmp/a?b=1", "/tmp/a"),
        ("file:///tmp/a#frag", "/tmp/a"),
    ],
)
def test_path_from_uri(uri: str, path: str) -> None:
    assert path_from_uri(uri) == path
    assert cwd_from_uri(uri) == path


def test_non_utf8_bytes_survive_as_surrogates() -> None:
    path = path_from_uri("file:///tmp/%FF%FEname")
    assert path.encode("utf-8", "surrogateescape") == b"/tmp/\xff\xfename"
    assert uri_from_path(path) == "file:///tmp/%FF%FEname"


@pytest.mark.parametrize(
    "uri, message",
    [
        ("/tmp/x", RELATIVE_URI),
        ("tmp/x", RELATIVE_URI),
        ("", RELATIVE_URI),
        ("//host/x", RELATIVE_URI),
        ("http://host/tmp", unsupported_scheme("http")),
        ("files:///tmp", unsupported_scheme("files")),
        ("HTTPS://h/x", unsupported_scheme("https")),
    ],
)
def test_a_non_file_uri_is_invalid_params_for_paths_and_cwds(uri: str, message: str) -> None:
    for from_uri in (path_from_uri, cwd_from_uri):
        with pytest.raises(RpcError) as info:
            from_uri(uri)
        assert (info.value.code, info.value.message, info.value.data) == (
            INVALID_PARAMS, message, None
        )


@pytest.mark.parametrize(
    "uri",
    [
        "file://server/share",
        "file://127.0.0.1/tmp",
        "file://localhost:8080/tmp",
        "file://user@localhost/tmp",
        "file:///C:/Windows",
        "file:///c:",
        "file:///z:/x",
        "file:///a%00b",
        "file:///a\x00b",
    ],
)
def test_a_uri_that_names_no_path_on_this_host(uri: str) -> None:
    with pytest.raises(RpcError) as info:
        path_from_uri(uri)
    assert (info.value.code, info.value.message) == (INVALID_REQUEST, foreign_path(uri))
    with pytest.raises(RpcError) as info:
        cwd_from_uri(uri)
    assert (info.value.code, info.value.message) == (INVALID_PARAMS, foreign_cwd(uri))


@pytest.mark.parametrize(
    "path, uri",
    [
        ("/tmp/a b", "file:///tmp/a%20b"),
        ("/", "file:///"),
        ("/a?b#c%d", "file:///a%3Fb%23c%25d"),
        ("/✓", "file:///%E2%9C%93"),
        ("/\udcff", "file:///%FF"),
        ("/a/b/", "file:///a/b/"),
    ],
)
def test_uri_from_path(path: str, uri: str) -> None:
    assert uri_from_path(path) == uri


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/tmp",
        "/tmp/a b",
        "/tmp/  two  spaces ",
        "/100%",
        "/%41",
        "/a?b",
        "/a#b",
        "/a;b",
        "/a+b",
        "/a\nb\tc",
        "/~user/.hidden",
        "/ünïcödé/✓/日本",
        "/bad/\udcff\udc80",
        "/mixed/é\udce9",
        "//double/slash",
        "/a/../b/./c",
        "/trailing/",
        "/'quotes\"and\\backslash",
        "/C",
        "/tmp/C:",
    ],
)
def test_path_uri_round_trip(path: str) -> None:
    uri = uri_from_path(path)
    assert uri.startswith("file:///") or uri.startswith("file:////")
    uri.encode("ascii")  # fully escaped
    assert path_from_uri(uri) == path


# -- what is not JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        b'{"id":1,"method":"m","params":{"x":NaN}}',
        '{"id":1,"method":"m","params":[Infinity, -Infinity]}',
        '{"id":1,"method":"m"}'.encode("utf-16"),  # json.loads alone would guess UTF-16
        b"\xef\xbb\xbf" + b'{"id":1,"method":"m"}',  # a UTF-8 BOM, as in a text frame
    ],
)
def test_python_json_extensions_are_malformed_frames(frame: bytes | str) -> None:
    assert isinstance(parse(frame), Malformed)


# -- OutputLog ----------------------------------------------------------------------------------


def seqs(chunks: list[Chunk]) -> list[int]:
    return [c.seq for c in chunks]


def test_empty_log() -> None:
    log = OutputLog(100, 10)
    assert len(log) == 0 and log.first_retained_seq is None
    assert log.read(0, None) == ([], False) and log.read(0, 10) == ([], False)
    assert not log.has_after(0)
    assert (log.retained_bytes, log.dropped_bytes, log.dropped_chunks) == (0, 0, 0)


def test_log_is_bounded_in_bytes_and_counts_what_it_drops() -> None:
    log = OutputLog(10, 100)
    log.append(1, "stdout", b"aaaa")
    log.append(2, "stderr", b"bbbb")
    assert (len(log), log.retained_bytes, log.dropped_bytes) == (2, 8, 0)
    log.append(3, "stdout", b"cccc")  # 12 > 10: the oldest goes
    assert seqs(log.read(0, None)[0]) == [2, 3]
    assert (log.retained_bytes, log.dropped_bytes, log.dropped_chunks) == (8, 4, 1)
    assert log.first_retained_seq == 2
    log.append(4, "stdout", b"dd")  # exactly 10: nothing dropped
    assert (log.retained_bytes, log.dropped_chunks) == (10, 1)


def test_log_is_bounded_in_chunks() -> None:
    log = OutputLog(1 << 20, 3)
    for seq in range(1, 6):
        log.append(seq, "stdout", b"x")
    assert seqs(log.read(0, None)[0]) == [3, 4, 5]
    assert (len(log), log.dropped_chunks, log.dropped_bytes, log.retained_bytes) == (3, 2, 2, 3)


def test_newest_chunk_is_always_kept_even_when_over_the_byte_bound() -> None:
    log = OutputLog(10, 100)
    log.append(1, "stdout", b"small")
    log.append(2, "stdout", b"x" * 100)
    assert seqs(log.read(0, None)[0]) == [2]
    assert (log.retained_bytes, log.dropped_bytes, log.dropped_chunks) == (100, 5, 1)
    log.append(3, "stdout", b"y")  # now the big one goes
    assert seqs(log.read(0, None)[0]) == [3]
    assert (log.retained_bytes, log.dropped_bytes) == (1, 105)
    single = OutputLog(0, 1)
    single.append(1, "pty", b"kept")
    assert seqs(single.read(0, None)[0]) == [1]


@pytest.mark.parametrize("drop", ["retention", "ack"])
def test_a_dropped_chunk_is_let_go_at_once(drop: str) -> None:
    """The log must not keep dropped chunks alive until it next compacts its list: with large
    chunks that once held a whole 256 MiB stream in memory for the closed process's lifetime."""
    log = OutputLog(10, 100)
    chunks = [bytes([65 + i]) * 10 for i in range(4)]  # distinct objects, 10 bytes each

    def references() -> list[int]:
        return [sys.getrefcount(c) for c in chunks]

    alone = references()
    if drop == "ack":
        log.hold = True
    for seq in range(1, 5):
        log.append(seq, "stdout", chunks[seq - 1])
    if drop == "ack":
        log.discard_through(3)
    # Dropped: back to the references the test holds; retained: one more, the log's.
    assert references() == [alone[0], alone[1], alone[2], alone[3] + 1]
    assert seqs(log.read(0, None)[0]) == [4]


def test_read_after_seq_with_gaps_in_seqs() -> None:
    log = OutputLog(100, 100)
    for seq in (1, 2, 5, 7):  # exit and close take seqs too
        log.append(seq, "stdout", b"%d" % seq)
    assert seqs(log.read(0, None)[0]) == [1, 2, 5, 7]
    assert seqs(log.read(2, None)[0]) == [5, 7]
    assert seqs(log.read(3, None)[0]) == [5, 7]
    assert seqs(log.read(6, None)[0]) == [7]
    assert log.read(7, None) == ([], False)
    assert log.read(100, 5) == ([], False)
    assert log.has_after(6) and not log.has_after(7)
    assert [(c.seq, c.stream, c.data) for c in log.read(4, None)[0]] == [
        (5, "stdout", b"5"), (7, "stdout", b"7")
    ]


def test_read_with_max_bytes_returns_at_least_one_chunk() -> None:
    log = OutputLog(100, 100)
    for seq, data in ((1, b"aaaaa"), (2, b"bbbbb"), (3, b"ccccc")):
        log.append(seq, "stdout", data)
    assert [(seqs(c), t) for c, t in [log.read(0, 0)]] == [([1], True)]
    assert [(seqs(c), t) for c, t in [log.read(0, 3)]] == [([1], True)]
    assert [(seqs(c), t) for c, t in [log.read(0, 5)]] == [([1], True)]
    assert [(seqs(c), t) for c, t in [log.read(0, 9)]] == [([1], True)]
    assert [(seqs(c), t) for c, t in [log.read(0, 10)]] == [([1, 2], True)]
    assert [(seqs(c), t) for c, t in [log.read(0, 15)]] == [([1, 2, 3], False)]
    assert [(seqs(c), t) for c, t in [log.read(0, 1000)]] == [([1, 2, 3], False)]
    assert [(seqs(c), t) for c, t in [log.read(2, 1)]] == [([3], False)]
    big = OutputLog(100, 100)
    big.append(1, "stdout", b"x" * 50)
    assert seqs(big.read(0, 1)[0]) == [1]


def test_read_of_seqs_that_were_dropped_starts_at_the_oldest_retained() -> None:
    log = OutputLog(4, 100)
    for seq in range(1, 11):
        log.append(seq, "stdout", b"x")
    assert seqs(log.read(0, None)[0]) == [7, 8, 9, 10]
    assert seqs(log.read(3, None)[0]) == [7, 8, 9, 10]
    assert log.first_retained_seq == 7 and log.dropped_chunks == 6


def test_bisection_stays_right_after_compaction_of_many_chunks() -> None:
    log = OutputLog(1 << 30, 50)
    total = 5000
    for i in range(1, total + 1):
        log.append(2 * i, "stdout" if i % 2 else "stderr", b"%d" % i)  # even seqs only
        if i in (1024, 1025, 1026, 2049, 2500):
            first = 2 * (i - 49) if i > 50 else 2
            assert log.first_retained_seq == first
            assert seqs(log.read(first - 1, None)[0])[0] == first
    # Memory stays bounded: the list is compacted, not grown forever.
    assert len(log._chunks) < 1200 and len(log._seqs) == len(log._chunks)
    assert len(log) == 50
    assert log.dropped_chunks == total - 50
    first = 2 * (total - 49)
    assert log.first_retained_seq == first
    assert seqs(log.read(0, None)[0]) == list(range(first, 2 * total + 1, 2))
    for after in (first - 1, first, first + 1, 2 * total - 2, 2 * total - 1):
        expected = [s for s in range(first, 2 * total + 1, 2) if s > after]
        assert seqs(log.read(after, None)[0]) == expected
        assert seqs(log.read(after, 1)[0]) == expected[:1]
    assert log.read(2 * total, None) == ([], False)
    assert log.has_after(2 * total - 1) and not log.has_after(2 * total)
    chunk = log.read(2 * total - 1, None)[0][0]
    assert chunk == Chunk(2 * total, "stderr", b"%d" % total)


def test_compaction_triggers_on_byte_bound_too() -> None:
    log = OutputLog(10, 1 << 16)
    for seq in range(1, 2501):
        log.append(seq, "stdout", b"x")
    assert seqs(log.read(0, None)[0]) == list(range(2491, 2501))
    assert log.dropped_bytes == 2490 and log.retained_bytes == 10


# -- Timers -------------------------------------------------------------------------------------


def drain(t: Timers, now: float) -> list[Hashable]:
    """Every key due by ``now``, in the order `Timers.pop_due` hands them out one by one."""
    keys = []
    while (key := t.pop_due(now)) is not None:
        keys.append(key)
    return keys


def test_empty_timers() -> None:
    t = Timers()
    assert t.next_deadline() is None and drain(t, 1e9) == []
    t.cancel("never set")


def test_timers_fire_in_deadline_order() -> None:
    t = Timers()
    t.set("c", 3.0)
    t.set("a", 1.0)
    t.set("b", 2.0)
    assert t.next_deadline() == 1.0
    assert drain(t, 0.5) == []
    assert drain(t, 2.0) == ["a", "b"]  # due at or before now, earliest first
    assert t.next_deadline() == 3.0  # "a" and "b" are gone, "c" is still set
    assert drain(t, 10.0) == ["c"]
    assert t.next_deadline() is None


def test_ties_fire_in_the_order_they_were_set_without_comparing_keys() -> None:
    t = Timers()
    k1, k2, k3 = object(), object(), object()  # unorderable keys
    t.set(k2, 1.0)
    t.set(k1, 1.0)
    t.set(k3, 0.5)
    assert drain(t, 1.0) == [k3, k2, k1]


def test_setting_a_key_again_replaces_its_deadline() -> None:
    t = Timers()
    t.set("k", 5.0)
    t.set("k", 1.0)  # earlier
    assert t.next_deadline() == 1.0
    assert drain(t, 10.0) == ["k"]  # once, not twice
    t.set("k", 1.0)
    t.set("k", 5.0)  # later: the stale 1.0 entry must not fire
    assert t.next_deadline() == 5.0
    assert drain(t, 2.0) == []
    assert drain(t, 5.0) == ["k"]
    t.set("k", 2.0)
    t.set("k", 2.0)  # same time again: still one firing
    assert drain(t, 3.0) == ["k"]


def test_replacing_moves_a_key_behind_ties() -> None:
    t = Timers()
    t.set("a", 1.0)
    t.set("b", 1.0)
    t.set("a", 1.0)
    assert drain(t, 1.0) == ["b", "a"]


def test_cancel() -> None:
    t = Timers()
    t.set(("read", 1), 1.0)
    t.set(("read", 2), 2.0)
    t.cancel(("read", 1))
    assert t.next_deadline() == 2.0  # only ("read", 2) is still set
    t.cancel(("read", 2))
    assert t.next_deadline() is None
    assert drain(t, 100.0) == []
    t.set(("read", 1), 3.0)  # a cancelled key may be set again
    assert drain(t, 3.0) == [("read", 1)]


def test_many_replacements_do_not_leak_firings() -> None:
    t = Timers()
    for i in range(1000):
        t.set("k", float(i % 7))
    assert drain(t, 100.0) == ["k"]
    assert t.next_deadline() is None


# -- small helpers of the wire ------------------------------------------------------------------


def test_rpc_error_json() -> None:
    assert RpcError(-32600, "m").to_json() == {"code": -32600, "message": "m"}
    assert RpcError(-32603, "m", {"kind": "spawnNotFound"}).to_json() == {
        "code": -32603, "message": "m", "data": {"kind": "spawnNotFound"}
    }
    assert RpcError(1, "m", 0).to_json()["data"] == 0
    assert invalid_request("x").to_json() == {"code": -32600, "message": "x"}
    assert invalid_params("y").to_json() == {"code": -32602, "message": "y"}
    assert internal_error("z").to_json() == {"code": -32603, "message": "z"}
    assert internal_error("z", [1]).data == [1]
    assert isinstance(RpcError(1, "m"), Exception)


@pytest.mark.parametrize("process_id", ["p", "", 'q"uote\\', "✓ünï", "\ud800"])
@pytest.mark.parametrize("stream", ["stdout", "stderr", "pty"])
def test_spliced_output_notification_is_the_same_json(process_id: str, stream: str) -> None:
    data = bytes(range(256))
    encoded = encode_output(output_prefix(process_id, stream), 12345, b64(data).encode())
    encoded.decode("ascii")
    assert json.loads(encoded) == {
        "jsonrpc": "2.0",
        "method": "process/output",
        "params": {"processId": process_id, "stream": stream, "seq": 12345, "chunk": b64(data)},
    }


@pytest.mark.parametrize(
    "frame, parsed",
    [
        ('{"method": "m"}', Incoming(method="m", params=None, id=None)),
        ('{"method": "m", "params": [1], "id": 0}', Incoming(method="m", params=[1], id=0)),
        ('{"method": "m", "id": "0"}', Incoming(method="m", params=None, id="0")),
        (b'{"id": 1, "result": null}', ClientResponse(1)),
        ('{"id": "x", "error": null}', ClientResponse("x")),
        ("[]", Malformed("expected a JSON-RPC object")),
        ('{"id": 1}', Malformed("missing field `method`")),
        ('{"id": 1.0, "method": "m"}',
         Malformed("data did not match any variant of untagged enum RequestId")),
        ('{"method": null}', Malformed("missing field `method`")),
    ],
)
def test_parse(frame: str | bytes, parsed: Any) -> None:
    assert parse(frame) == parsed


def test_fields_reader() -> None:
    fields = Fields({"a": "x", "n": None, "k": 3}, "S")
    assert fields.text("a") == "x" and fields.opt_text("n") is None and fields.opt_uint("k") == 3
    assert fields.flag("absent", True) is True
    with pytest.raises(RpcError) as info:
        fields.text("absent")
    assert info.value.message == "missing field `absent`"
    with pytest.raises(RpcError) as info:
        Fields(None, "S")
    assert info.value.message == "invalid type: null, expected struct S"


@pytest.mark.parametrize(
    "value, text",
    [(None, "null"), (True, "boolean `true`"), (False, "boolean `false`"), (0, "number"),
     (1.5, "number"), ("é\"", 'string "é\\""'), ([], "sequence"), ({}, "map")],
)
def test_describe_names_json_values_as_the_reference_does(value: Any, text: str) -> None:
    assert describe(value) == text


@pytest.mark.parametrize("returncode, code", [(0, 0), (1, 1), (255, 255), (-9, 137), (-15, 143),
                                               (-2, 130)])
def test_exit_code_of(returncode: int, code: int) -> None:
    assert exit_code_of(returncode) == code


def test_config_defaults_match_the_protocol() -> None:
    config = Config()
    assert (config.session_ttl, config.kill_grace, config.closed_ttl) == (30.0, 1.0, 30.0)
    assert config.retention_bytes == 1 << 20 and config.write_id_memory == 4096
    assert config.max_fs_handles == 128
    assert config.sandbox_type == "none"
