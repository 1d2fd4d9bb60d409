"""A redacted trace keeps every environment value, the server's and the client's, out of its
header, its frames and its spawns (PATH and TMPDIR aside: the core reads them)."""

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


def test_the_values_become_filler_of_the_same_length_and_it_replays() -> None:
    h = session(redact=True)
    text = "\n".join(h.lines)
    assert SECRET not in text and "t0k" not in text and "/root" not in text
    header = json.loads(h.lines[0])
    assert header["host"]["env"] == {"PATH": "/bin", "MY_API_KEY": "x" * len(SECRET),
                                     "GH_TOKEN": "xxx", "HOME": "xxxxx"}
    assert replay(h.lines).ok
    assert spawned_env(h)["MY_API_KEY"] == SECRET  # the live process still gets the real one


def test_a_value_the_client_sent_is_filler_in_its_frame_and_its_spawn() -> None:
    sent = {"GITHUB_PAT": "ghp_from_the_client", "TMPDIR": "/tmp/t", "NOTE": "caf\u00e9"}
    h = session(redact=True, env=sent)
    text = "\n".join(h.lines[1:])
    assert "ghp_from_the_client" not in text and "caf" not in text
    assert "/tmp/t" in text  # TMPDIR, which the core reads, as it is
    assert replay(h.lines).ok
    assert spawned_env(h)["GITHUB_PAT"] == "ghp_from_the_client"


def test_an_env_policys_set_values_are_filler_too() -> None:
    policy = dict(EVERYTHING, set={"SENTRY_DSN": "https://k3y@o1.ingest.sentry.io/2"})
    h = Harness(Config(), HOST)
    h.lines.clear()
    h.core = Recorder(ServerCore(Config(), HOST), h.lines.append, redact=True)
    h.connect(1)
    h.handshake(1)
    h.start(1, "p", ["env"], envPolicy=policy)
    assert "k3y" not in "\n".join(h.lines)
    assert replay(h.lines).ok


def test_without_redaction_the_header_has_the_environment_as_it_is() -> None:
    h = session(redact=False)
    assert json.loads(h.lines[0])["host"]["env"]["MY_API_KEY"] == SECRET
    assert replay(h.lines).ok


def test_names_that_do_not_say_secret_are_filler_too() -> None:
    env = {"PATH": "/bin", "GITHUB_PAT": "pat-one", "AWS_SESSION": "sess-two",
           "SENTRY_DSN": "https://key-three@o0.ingest.sentry.io/0",
           "DATABASE_URL": "postgres://user:pw-four@db:5432/app", "TMPDIR": "/var/tmp"}
    host = Host(env=env)
    h = Harness(Config(path_prepend=("/opt/tools",)), host)
    h.lines.clear()
    h.core = Recorder(ServerCore(Config(path_prepend=("/opt/tools",)), host), h.lines.append,
                      redact=True)
    h.connect(1)
    h.handshake(1)
    h.start(1, "p", ["env"], envPolicy=EVERYTHING)
    text = "\n".join(h.lines)
    for value in ("pat-one", "sess-two", "key-three", "pw-four"):
        assert value not in text
    header = json.loads(h.lines[0])["host"]["env"]
    assert header["PATH"].endswith("/bin") and header["TMPDIR"] == "/var/tmp"
    assert spawned_env(h)["PATH"] == "/opt/tools:/bin"
    assert replay(h.lines).ok
