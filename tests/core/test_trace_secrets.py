"""A redacted trace keeps the server's secret variables out of its header and its spawns."""

from __future__ import annotations

import json

from execproto import Config, Host, Recorder, ServerCore, Spawn, replay

from .harness import Harness

SECRET = "hunter2-the-api-key"
HOST = Host(env={"PATH": "/bin", "MY_API_KEY": SECRET, "GH_TOKEN": "t0k", "HOME": "/root"})
EVERYTHING = {"inherit": "all", "ignoreDefaultExcludes": True, "exclude": [], "set": {},
              "includeOnly": []}


def session(redact: bool, env: dict[str, str] | None = None) -> Harness:
    h = Harness(Config(), HOST)
    h.lines.clear()
    h.core = Recorder(ServerCore(Config(), HOST), h.lines.append, redact=redact)
    h.connect(1)
    h.handshake(1)
    # A policy that takes even the secrets: the spawn carries them, so the trace would too.
    h.start(1, "p", ["env"], envPolicy=EVERYTHING, env=env or {})
    return h


def spawned_env(h: Harness) -> dict[str, str]:
    spawns = [a for a in h.actions if isinstance(a, Spawn)]
    return dict(spawns[-1].spec.env)


def test_the_secrets_become_filler_of_the_same_length_and_it_replays() -> None:
    h = session(redact=True)
    text = "\n".join(h.lines)
    assert SECRET not in text and "t0k" not in text
    header = json.loads(h.lines[0])
    assert header["host"]["env"] == {"PATH": "/bin", "MY_API_KEY": "x" * len(SECRET),
                                     "GH_TOKEN": "xxx", "HOME": "/root"}
    assert replay(h.lines).ok
    assert spawned_env(h)["MY_API_KEY"] == SECRET  # the live process still gets the real one


def test_a_value_the_client_sent_is_kept_as_the_frame_has_it() -> None:
    h = session(redact=True, env={"MY_API_KEY": "from-the-client"})
    assert '"from-the-client"' in "\n".join(h.lines[1:])
    assert replay(h.lines).ok


def test_without_redaction_the_header_has_the_environment_as_it_is() -> None:
    h = session(redact=False)
    assert json.loads(h.lines[0])["host"]["env"]["MY_API_KEY"] == SECRET
    assert replay(h.lines).ok


def test_passwords_credentials_and_urls_with_credentials_are_filler_too() -> None:
    env = {"PATH": "/bin", "DB_PASSWORD": "pw-one", "PGPASS": "pw-two",
           "AWS_CREDENTIALS": "cred", "DATABASE_URL": "postgres://user:pw-three@db:5432/app",
           "PLAIN_URL": "https://example.org/app"}
    host = Host(env=env)
    h = Harness(Config(), host)
    h.lines.clear()
    h.core = Recorder(ServerCore(Config(), host), h.lines.append, redact=True)
    h.connect(1)
    h.handshake(1)
    h.start(1, "p", ["env"], envPolicy=EVERYTHING)
    text = "\n".join(h.lines)
    for value in ("pw-one", "pw-two", "cred", "pw-three"):
        assert value not in text
    header = json.loads(h.lines[0])["host"]["env"]
    assert header["PLAIN_URL"] == "https://example.org/app" and header["PATH"] == "/bin"
    assert replay(h.lines).ok
