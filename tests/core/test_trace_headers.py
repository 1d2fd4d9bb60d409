"""A redacted trace hides the values of the credential headers an ``http/request`` carries,
`Proxy-Authorization` and `Cookie` in the request and `Set-Cookie` in the response, wherever
the trace holds them (the client's frame, the `RunHttp` the core made of it, the response
event and the answer sent back, which the trace keeps as base64), and still replays; the live
core meanwhile works with the real values.

A search of the raw trace text would miss a value inside a base64 ``$bytes`` (every `Send`
is one), so `_texts` decodes them before looking.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from execproto import Config, HttpResponded, Recorder, RunHttp, ServerCore, replay

from .harness import Harness

# Request headers as a client may spell them: the names in any case, a name written with a
# JSON escape, the value before the name, a value holding an escaped quote.
REQUEST = (
    '{"jsonrpc": "2.0", "id": 7, "method": "http/request", "params": {'
    '"method": "GET", "url": "http://h/", "requestId": "r", "headers": ['
    '{"name": "Proxy-Authorization", "value": "Basic proxy-secret-1"}, '
    '{"name": "proxy-authorization", "value": "Basic proxy-secret-2"}, '
    '{"name": "Cookie", "value": "sid=cookie-secret-3"}, '
    '{"value": "sid=cookie-secret-4", "name": "COOKIE"}, '
    '{"name": "Co\\u006fkie", "value": "sid=cookie-secret-5"}, '
    '{"name": "Cookie", "value": "a=\\"cookie-secret-6\\""}, '
    '{"name": "Accept", "value": "kept/1"}]}}'
)
REQUEST_SECRETS = ["proxy-secret-1", "proxy-secret-2", "cookie-secret-3", "cookie-secret-4",
                   "cookie-secret-5", "cookie-secret-6"]
RESPONSE = (("Set-Cookie", "sid=set-cookie-secret-7; HttpOnly"),
            ("set-cookie", "b=set-cookie-secret-8"),
            ("Server", "kept/2"))
RESPONSE_SECRETS = ["set-cookie-secret-7", "set-cookie-secret-8"]


def _texts(value: Any) -> Iterator[str]:
    """Every string in a trace line's JSON, a ``$bytes`` value decoded."""
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            yield base64.b64decode(value["$bytes"]).decode("utf-8", "replace")
            return
        for key, item in value.items():
            yield key
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, str):
        yield value


def everything_in(lines: list[str]) -> str:
    return "\n".join(text for line in lines for text in _texts(json.loads(line)))


def redacting() -> Harness:
    h = Harness()
    h.lines.clear()
    h.core = Recorder(ServerCore(Config()), h.lines.append, redact=True)
    h.connect(1)
    h.handshake(1)
    return h


def test_proxy_authorization_cookie_and_set_cookie_are_filler_and_it_replays() -> None:
    h = redacting()
    h.send(1, REQUEST)
    (run_http,) = h.of_type(RunHttp)
    # Live, the request goes out with the real values.
    assert dict(run_http.request.headers)["Proxy-Authorization"] == "Basic proxy-secret-1"
    assert ("Cookie", 'a="cookie-secret-6"') in run_http.request.headers
    h.feed(HttpResponded(op=run_http.op, status=200, headers=RESPONSE))
    (answer,) = [m for m in h.messages(1) if m.get("id") == 7]
    assert {"name": "Set-Cookie", "value": "sid=set-cookie-secret-7; HttpOnly"} in (
        answer["result"]["headers"])  # the client gets the real cookie
    seen = everything_in(h.lines)
    leaked = [secret for secret in REQUEST_SECRETS + RESPONSE_SECRETS if secret in seen]
    assert leaked == [], leaked
    # Filler of the same length, in the RunHttp and in the answer; the other headers as sent.
    assert "x" * len("Basic proxy-secret-1") in seen
    assert "x" * len("sid=set-cookie-secret-7; HttpOnly") in seen
    assert "kept/1" in seen and "kept/2" in seen
    result = replay(h.lines)
    assert result.ok, list(result.diff())


def test_without_redaction_the_same_session_keeps_them() -> None:
    """The control: the search finds the values where a trace is not redacted."""
    h = Harness()
    h.connect(1)
    h.handshake(1)
    h.send(1, REQUEST)
    (run_http,) = h.of_type(RunHttp)
    h.feed(HttpResponded(op=run_http.op, status=200, headers=RESPONSE))
    seen = everything_in(h.lines)
    assert [secret for secret in REQUEST_SECRETS + RESPONSE_SECRETS if secret in seen] == (
        REQUEST_SECRETS + RESPONSE_SECRETS)
    h.assert_replays()


# The core takes a header object with another key besides name and value (it ignores it, as
# serde does): the redaction finds "name" and "value" anywhere in the header's object.
def test_a_header_with_another_key_between_name_and_value_is_filler_too() -> None:
    h = redacting()
    h.send(1, '{"jsonrpc": "2.0", "id": 7, "method": "http/request", "params": {'
              '"method": "GET", "url": "http://h/", "requestId": "r", "headers": ['
              '{"name": "Cookie", "sensitive": true, "value": "sid=cookie-secret-9"}]}}')
    (run_http,) = h.of_type(RunHttp)
    assert run_http.request.headers == (("Cookie", "sid=cookie-secret-9"),)  # it is served
    seen = everything_in(h.lines)
    assert "cookie-secret-9" not in seen
    assert replay(h.lines).ok
