"""The real `codex exec` 0.171.0 driving execproto, offline, with a scripted model.

For each adapter one runner (runner.py) plays every scenario inside its own network namespace
(`unshare -n`: only loopback exists), and reports what the model was told back; the three run
at once. Each test judges one scenario from that report: the tool output the model received and
the files left behind, never codex's exit status, which is 0 even when no command could run.

EXECPROTO_CODEX_SERVER=reference runs the same scenarios against the reference's own
`codex exec-server`, which is how they were checked.
"""

from __future__ import annotations

import json

import pytest
from reference import REFERENCE, WHY_MISSING

from .judge import Runs, facts, ran

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)


def test_shell_command_and_exit_code(runs: Runs, server: str) -> None:
    out = facts(runs, server, "shell_exit_code", 2)["outputs"]["call"]
    assert ran(out, 3) and out.endswith("Output:\nhi\n"), out


def test_apply_patch_creates_a_file(runs: Runs, server: str) -> None:
    found = facts(runs, server, "apply_patch", 2)
    assert "A hello.txt" in found["outputs"]["call"], found["outputs"]
    assert found["file"] == "hello from apply_patch\n"


def test_terminal_takes_stdin(runs: Runs, server: str) -> None:
    outputs = facts(runs, server, "terminal_stdin", 3)["outputs"]
    assert "Process running with session ID" in outputs["start"], outputs
    assert "ping" in outputs["write"], outputs  # the terminal echoes it, then cat prints it


def test_repository_skill_is_found_through_fs_walk(runs: Runs, server: str) -> None:
    told = facts(runs, server, "repository_skill", 1)["first_request"]
    # The skills codex lists for the model, one a line: "- name: description (file: ...)".
    lines = [line for line in told.split("\\n") if line.endswith("SKILL.md)")]  # JSON-escaped
    listed = {line.split(": ", 1)[0]: line for line in lines}
    assert "- demo-skill" in listed, f"the model was told only of {sorted(listed)}"
    assert "Frobnicates the widgets of the e2e suite." in listed["- demo-skill"]


def test_dropped_connection_is_resumed(runs: Runs, server: str) -> None:
    found = facts(runs, server, "resumed_connection", 2)
    # codex 0.171 reconnects at once and resumes its session (initialize with resumeSessionId,
    # then process/read from seq 0): the server must answer with the same session id.
    # One cut, so one resume that succeeds: two session ids answered, the same one. A resume
    # the server turns away (on a loaded machine it may not have seen the old connection go
    # yet) answers none, and codex tries again: more connections than two are no error.
    assert found["cuts"] == 1 and found["connections"] >= 2, found
    assert len(found["session_ids"]) == 2 and len(set(found["session_ids"])) == 1, found
    out = found["outputs"]["call"]
    assert ran(out, 0) and out.endswith("Output:\ndone\n"), out


def test_stdio_transport_from_environments_toml(runs: Runs, server: str) -> None:
    out = facts(runs, server, "stdio_transport", 2)["outputs"]["call"]
    assert ran(out, 3) and out.endswith("Output:\nhi\n"), out


def test_bearer_token_from_environments_toml(runs: Runs, server: str) -> None:
    out = facts(runs, server, "bearer_token", 2)["outputs"]["call"]
    assert ran(out, 3) and out.endswith("Output:\nhi\n"), out


def test_wss_with_a_bearer_token_and_ssl_cert_file(runs: Runs, server: str) -> None:
    if server == "reference":
        pytest.skip("the reference serves no TLS")
    found = facts(runs, server, "tls_bearer_token", 2)
    assert found["url"].startswith("wss://127.0.0.1:") and not found["in_clear"], found
    out = found["outputs"]["call"]
    assert ran(out, 3) and out.endswith("Output:\nover tls\n"), out


def test_wrong_token_is_refused_cleanly(runs: Runs, server: str) -> None:
    found = facts(runs, server, "wrong_token", 2)
    assert found["answer"].startswith("HTTP/1.1 401"), found
    assert "No usable execution environment" in found["outputs"]["call"], found["outputs"]
    assert not found["reached"]


def test_read_only_denies_a_write(runs: Runs, server: str) -> None:
    found = facts(runs, server, "read_only", 2)
    out = found["outputs"]["call"]
    # It ran and failed: a command that never started would leave no file either.
    assert "Process exited with code" in out and not ran(out, 0), out
    assert not found["written"]


def test_process_start_reports_linux_seccomp(runs: Runs, server: str) -> None:
    for scenario, requests, started in [("read_only", 2, 1), ("workspace_write", 4, 3)]:
        types = facts(runs, server, scenario, requests)["sandbox_types"]
        assert types == ["linuxSeccomp"] * started, f"{scenario}: {types}"


def test_workspace_write_allows_the_workdir(runs: Runs, server: str) -> None:
    found = facts(runs, server, "workspace_write", 4)
    assert ran(found["outputs"]["inside"], 0), found["outputs"]
    assert found["inside"]


def test_workspace_write_denies_a_directory_outside(runs: Runs, server: str) -> None:
    found = facts(runs, server, "workspace_write", 4)
    out = found["outputs"]["outside"]
    assert "Process exited with code" in out and not ran(out, 0), out
    assert not found["outside"]


def test_workspace_write_denies_the_network(runs: Runs, server: str) -> None:
    found = facts(runs, server, "workspace_write", 4)
    out = found["outputs"]["network"]
    assert "Process exited with code" in out and "connected" not in out, out
    assert not found["accepted"], "the sandboxed command reached a listener on 127.0.0.1"


def test_read_only_reads_a_workspace_under_tmp(runs: Runs, server: str) -> None:
    """Codex's default mode, the workspace under /tmp: the command reads it and /tmp, and its
    write is denied, as under the reference."""
    found = facts(runs, server, "read_only_under_tmp", 3)
    read, write = found["outputs"]["read"], found["outputs"]["write"]
    assert ran(read, 0) and "hello from the workspace" in read and "read" in read, read
    assert "Process exited with code" in write and not ran(write, 0), write
    assert not found["written"]


def test_a_managed_network_runs_commands_through_the_proxy(runs: Runs, server: str) -> None:
    """The user's `[features.network_proxy]`: codex refuses every command on an executor that
    does not announce `networkProxyLaunch`. Here the allowed name answers through the proxy,
    the denied one gets the reference's 403 body, the client hears both decisions, and the
    sandboxed command reaches nothing directly."""
    found = facts(runs, server, "managed_network", 4)
    outputs = found["outputs"]
    assert ran(outputs["allowed"], 0), outputs
    assert outputs["allowed"].endswith("Output:\nhello from allowed.test"), outputs
    blocked = json.loads(outputs["blocked"].split("Output:\n", 1)[1])
    assert blocked["reason"] == "denied" and blocked["host"] == "blocked.test", blocked
    assert outputs["direct"].endswith("Output:\nunreachable\n"), outputs
    assert found["decisions"] == 2, found
    assert found["sandbox_types"] == ["linuxSeccomp"] * 3, found


def test_an_administrators_network_with_review_domains(runs: Runs, server: str) -> None:
    """An administrator's `[experimental_network]` in /etc/codex/requirements.toml (an overlay
    the runner mounts): the proxy is launched with the network off, `reviewDomains` is sent
    (codex refuses every command without `networkProxyReviewDomains`), and with no decider a
    review domain is refused though allowlisted."""
    found = facts(runs, server, "admin_network", 4)
    outputs = found["outputs"]
    assert outputs["allowed"].endswith("Output:\nhello from allowed.test"), outputs
    refused = {name: json.loads(outputs[name].split("Output:\n", 1)[1])
               for name in ("blocked", "review")}
    assert refused["blocked"]["reason"] == "denied", refused
    assert refused["review"]["reason"] == "not_allowed", refused
    assert found["decisions"] == 3, found


def test_transparent_tcp_takes_a_program_that_ignores_the_proxy(runs: Runs, server: str) -> None:
    """`transparent_tcp = true`: codex needs `networkProxyTransparentTcp`; a proxied request
    answers, and a direct connection to an address the policy does not allow is refused, as
    one `socks5_tcp` decision."""
    found = facts(runs, server, "transparent_tcp", 3)
    if not found["transparent"]:
        pytest.skip("this server does not announce transparent TCP (root, nftables, nsenter)")
    outputs = found["outputs"]
    assert outputs["proxied"].endswith("Output:\nhello from allowed.test"), outputs
    assert outputs["direct"].endswith("Output:\nrefused\n"), outputs
    assert found["socks5_tcp"] == 1, found


def test_a_review_domain_is_decided_by_codex_through_its_guardian(runs: Runs, server: str) -> None:
    """The administrator's review domain with approvals that go to codex's Guardian reviewer
    (`approval_policy = "on-request"`, `approvals_reviewer = "auto_review"`): codex sets
    `policyDecisionTimeoutMs`, the server asks it (`network/policyRequest`, a JSON-RPC request)
    before letting the domain through, and codex answers with the Guardian's verdict, a model
    request of its own. The first verdict allows and the origin answers; the second denies, the
    server refuses with `source: "decider"`, and codex tells the model of the rejection."""
    found = facts(runs, server, "review_decider", 3)
    outputs = found["outputs"]
    assert ran(outputs["allowed"], 0), outputs
    assert outputs["allowed"].endswith("Output:\nhello from review.test"), outputs
    assert "rejected due to unacceptable risk" in outputs["denied"], outputs
    assert "scripted denial" in outputs["denied"] and "hello" not in outputs["denied"], outputs
    # One request to the client a command, each with an id of its own (a request, not news).
    asked = found["policy_requests"]
    assert [m["params"]["request"] for m in asked] == [
        {"protocol": "http", "host": "review.test", "port": 80}] * 2, asked
    assert len({m["id"] for m in asked}) == 2, asked
    processes = [m["params"]["processId"] for m in asked]
    assert len(set(processes)) == 2, asked
    # The Guardian was asked about exactly that access, once for each command.
    reviewed = [(r["host"], r["port"], r["trigger"]["callId"]) for r in found["reviewed"]]
    assert reviewed == [("review.test", 80, "allowed"), ("review.test", 80, "denied")], found
    # Each answer is reported back as the decider's.
    decisions = [(d["processId"], d["host"], d["decision"], d["source"])
                 for d in found["decisions"]]
    assert decisions == [(processes[0], "review.test", "allow", "decider"),
                         (processes[1], "review.test", "deny", "decider")], found["decisions"]
