"""The managed network proxy in the core: what `process/start` launches, and each decision.

`networkProxy` becomes the spawn's `proxy` (and, under a sandbox, all of its network); each
`ProxyAsked` is answered with one `AnswerProxy` and told to the client as
`network/policyDecision`; an allowlist miss with `policyDecisionTimeoutMs` asks the client
(`network/policyRequest`), whose answer, silence, or departure decides.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from execproto import AnswerProxy, Config, Host, ProxyAsked, Send, Spawn
from execproto._netproxy import Question

from .harness import Harness
from .test_sandbox_request import WORKSPACE_WRITE

PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": True, "allowUpstreamProxy": True,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": False,
    "domains": {"blocked.example": "deny", "example.com": "allow", "review.example": "allow"},
    "unixSockets": None,
}
WALL = 1_800_000_000.0  # 2027-01-15T08:00:00Z
ALLOWED = Question(protocol="http", host="example.com", port=80, method="GET",
                   client="127.0.0.1:40000", addresses=("93.184.215.14",))
DENIED = Question(protocol="http", host="blocked.example", port=80, method="GET",
                  client="127.0.0.1:40001", addresses=("93.184.215.15",))
MISSED = Question(protocol="https_connect", host="other.test", port=443, method="CONNECT",
                  client="127.0.0.1:40002", addresses=("93.184.215.16",))


def network(sandbox: dict[str, Any] = WORKSPACE_WRITE, setting: str = "enabled") -> Any:
    out = copy.deepcopy(sandbox)
    out["permissions"]["network"] = setting
    return out


def launched(timeout_ms: int | None = None, sandbox: Any = None, config: Config | None = None,
             **extra: Any) -> tuple[Harness, int | None, dict[str, Any]]:
    h = Harness(config or Config(sandbox_type="linuxSeccomp"), Host(env={"TMPDIR": "/tmp"}))
    h.connect()
    h.handshake()
    proxy: dict[str, Any] = {"proxy": PROXY, "environmentId": "remote"}
    if timeout_ms is not None:
        proxy["policyDecisionTimeoutMs"] = timeout_ms
    params = {"processId": "p", "argv": ["curl"], "cwd": "file:///tmp", "env": {},
              "tty": False, "enforceManagedNetwork": True, "managedNetwork": None,
              "networkProxy": proxy, "sandbox": sandbox, **extra}
    msg_id = h.request(1, "process/start", params)
    spawns = h.of_type(Spawn)
    return h, spawns[-1].proc if spawns else None, h.response(1, msg_id) or {}


def ask(h: Harness, proc: int, question: Question, ask_id: int = 1) -> list[Any]:
    return h.feed(ProxyAsked(proc=proc, ask=ask_id, question=question, wall=WALL))


def decisions(h: Harness) -> list[dict[str, Any]]:
    return [m["params"] for m in h.notifications(1, "network/policyDecision")]


def test_a_sandboxed_start_gets_the_proxy_as_all_of_its_network() -> None:
    for setting in ("enabled", "restricted"):  # an admin's proxy applies with the network off
        h, proc, _ = launched(sandbox=network(setting=setting))
        (spawn,) = h.of_type(Spawn)
        assert spawn.spec.proxy is not None and spawn.spec.proxy.domains, spawn
        assert spawn.spec.sandbox is not None and spawn.spec.sandbox.network


def test_an_operator_without_network_keeps_the_sandbox_off_it() -> None:
    from execproto import PathRule, Policy
    floor = Policy.of([PathRule(path="/", access="write")], network=False)
    h, _, _ = launched(sandbox=network(), config=Config(sandbox_type="linuxSeccomp", floor=floor))
    (spawn,) = h.of_type(Spawn)
    assert spawn.spec.sandbox is not None and not spawn.spec.sandbox.network


def test_without_a_sandbox_the_proxy_is_advice() -> None:
    h, proc, _ = launched()
    (spawn,) = h.of_type(Spawn)
    assert spawn.spec.proxy is not None and spawn.spec.sandbox is None


def test_enforced_without_a_proxy_fails_closed() -> None:
    h = Harness(Config(sandbox_type="linuxSeccomp"), Host(env={"TMPDIR": "/tmp"}))
    h.connect()
    h.handshake()
    msg_id = h.request(1, "process/start", {
        "processId": "p", "argv": ["curl"], "cwd": "file:///tmp", "env": {}, "tty": False,
        "enforceManagedNetwork": True, "sandbox": network()})
    response = h.response(1, msg_id)
    assert response is not None and response["error"]["code"] == -32602, response
    assert "managed networking is enforced" in response["error"]["message"]
    assert not h.of_type(Spawn)


def test_transparent_tcp_is_refused_while_not_announced() -> None:
    proxy = {**PROXY, "transparentTcp": True}
    h = Harness(Config(sandbox_type="linuxSeccomp"), Host(env={"TMPDIR": "/tmp"}))
    h.connect()
    h.handshake()
    msg_id = h.request(1, "process/start", {
        "processId": "p", "argv": ["curl"], "cwd": "file:///tmp", "env": {}, "tty": False,
        "enforceManagedNetwork": True, "networkProxy": {"proxy": proxy}, "sandbox": network()})
    response = h.response(1, msg_id)
    assert response is not None and "transparent TCP" in response["error"]["message"], response


def test_a_bad_config_is_the_references_error() -> None:
    h, proc, response = launched(networkProxy={"proxy": {**PROXY, "enabled": False}})
    assert proc is None
    assert response["error"] == {"code": -32602, "message": "invalid network proxy config: "
                                 "executor-local network proxy launch requires an enabled proxy"}


def test_each_decision_is_answered_and_told() -> None:
    h, proc, _ = launched(sandbox=network())
    assert proc is not None
    assert ask(h, proc, ALLOWED, 1)[0] == AnswerProxy(ask=1, allow=True)
    (refused, _) = ask(h, proc, DENIED, 2)
    assert isinstance(refused, AnswerProxy) and not refused.allow and refused.refusal
    status, headers, body = refused.refusal
    assert status == 403 and ("x-proxy-error", "blocked-by-denylist") in headers
    assert json.loads(body)["reason"] == "denied"
    told = decisions(h)
    assert [(d["host"], d["decision"]) for d in told] == [("example.com", "allow"),
                                                          ("blocked.example", "deny")]
    assert told[1]["processId"] == "p" and told[1]["timestamp"] == "2027-01-15T08:00:00.000Z"
    h.assert_replays()


def test_a_miss_asks_the_client_and_its_answer_rules() -> None:
    h, proc, _ = launched(timeout_ms=5000, sandbox=network())
    assert proc is not None
    actions = ask(h, proc, MISSED, 3)
    assert not [a for a in actions if isinstance(a, AnswerProxy)]  # waits for the decider
    (request,) = [m for m in h.messages(1) if m.get("method") == "network/policyRequest"]
    assert request["params"] == {"processId": "p", "request": {
        "protocol": "https_connect", "host": "other.test", "port": 443}}
    answered = h.send(1, {"jsonrpc": "2.0", "id": request["id"],
                          "result": {"decision": {"type": "allow"}}})
    assert AnswerProxy(ask=3, allow=True) in answered
    (told,) = decisions(h)
    assert told["source"] == "decider" and told["policyOverride"] is True
    h.assert_replays()


@pytest.mark.parametrize("silence", ["timeout", "disconnect", "error"])
def test_a_decider_that_does_not_answer_denies(silence: str) -> None:
    h, proc, _ = launched(timeout_ms=2000, sandbox=network())
    assert proc is not None
    ask(h, proc, MISSED, 4)
    (request,) = [m for m in h.messages(1) if m.get("method") == "network/policyRequest"]
    if silence == "timeout":
        assert not h.advance(1.99)
        actions = h.advance(0.02)
    elif silence == "disconnect":
        actions = h.disconnect(1)
    else:
        actions = h.send(1, {"jsonrpc": "2.0", "id": request["id"],
                             "error": {"code": -1, "message": "no"}})
    (answer,) = [a for a in actions if isinstance(a, AnswerProxy)]
    assert answer.ask == 4 and not answer.allow
    assert not h.advance(10)  # the deadline was cancelled, or spent: nothing more


def test_an_answer_to_nothing_asked_still_closes_the_connection() -> None:
    h, proc, _ = launched(timeout_ms=2000, sandbox=network())
    actions = h.send(1, {"jsonrpc": "2.0", "id": 99, "result": {"decision": {"type": "allow"}}})
    assert any(type(a).__name__ == "CloseConnection" for a in actions), actions


def test_a_gone_process_is_refused() -> None:
    h, proc, _ = launched(sandbox=network())
    assert proc is not None
    h.feed(__import__("execproto").ProcessSpawned(proc=proc, pid=4242))
    for stream in ("stdout", "stderr"):
        h.eof(proc, stream)
    h.exit(proc, 0)
    (answer,) = [a for a in ask(h, proc, ALLOWED, 9) if isinstance(a, AnswerProxy)]
    assert not answer.allow


def test_a_flood_of_questions_is_bounded() -> None:
    h, proc, _ = launched(timeout_ms=60_000, sandbox=network())
    assert proc is not None
    from execproto._proxying import MAX_ASKS_PER_CONNECTION
    for index in range(MAX_ASKS_PER_CONNECTION):
        ask(h, proc, MISSED, index)
    over = ask(h, proc, MISSED, 10_000)
    (answer,) = [a for a in over if isinstance(a, AnswerProxy)]
    assert not answer.allow
    sent = [a for a in h.actions if isinstance(a, Send)
            and b"network/policyRequest" in a.data]
    assert len(sent) == MAX_ASKS_PER_CONNECTION


def test_a_socks_refusal_is_a_reply_code() -> None:
    h, proc, _ = launched(sandbox=network())
    assert proc is not None
    socks = Question(protocol="socks5_tcp", host="blocked.example", port=443,
                     client="127.0.0.1:40003", addresses=("93.184.215.15",))
    (answer, _) = ask(h, proc, socks, 5)
    assert answer == AnswerProxy(ask=5, allow=False, socks_code=2)
    assert [d["protocol"] for d in decisions(h)] == ["socks5_tcp"]


def _transparent(proxy: dict[str, Any], announced: bool) -> tuple[Harness, dict[str, Any]]:
    capabilities = {"networkProxyTransparentTcp": announced}
    h = Harness(Config(sandbox_type="linuxSeccomp"),
                Host(env={"TMPDIR": "/tmp"}, environment_info={"capabilities": capabilities}))
    h.connect()
    h.handshake()
    msg_id = h.request(1, "process/start", {
        "processId": "p", "argv": ["curl"], "cwd": "file:///tmp", "env": {}, "tty": False,
        "enforceManagedNetwork": True, "networkProxy": {"proxy": proxy}, "sandbox": network()})
    return h, h.response(1, msg_id) or {}


def test_transparent_tcp_rides_on_the_spawn_where_announced() -> None:
    h, response = _transparent({**PROXY, "transparentTcp": True}, announced=True)
    assert "error" not in response, response
    (spawn,) = h.of_type(Spawn)
    assert spawn.spec.proxy is not None and spawn.spec.proxy.transparent_tcp


def test_transparent_tcp_needs_the_socks5_proxy() -> None:
    proxy = {**PROXY, "transparentTcp": True, "enableSocks5": False, "enableSocks5Udp": False}
    _, response = _transparent(proxy, announced=True)
    assert response["error"] == {"code": -32602, "message": "invalid network proxy config: "
                                 "transparent_tcp requires an enabled managed SOCKS5 proxy"}


def test_a_client_that_reads_nothing_is_told_nothing_yet_each_connection_is_answered() -> None:
    """A sandbox asking in a loop must not fill a connection that is not reading: while it is
    blocked the decisions are not told, and every question is still answered."""
    from execproto import SendBlocked, SendDrained
    h, proc, _ = launched(sandbox=network())
    assert proc is not None
    h.feed(SendBlocked(conn=1))
    answers = [a for i in range(50) for a in ask(h, proc, DENIED, i)
               if isinstance(a, AnswerProxy)]
    assert len(answers) == 50 and not any(a.allow for a in answers)
    assert decisions(h) == []
    h.feed(SendDrained(conn=1))
    ask(h, proc, ALLOWED, 99)
    assert [d["host"] for d in decisions(h)] == ["example.com"]
