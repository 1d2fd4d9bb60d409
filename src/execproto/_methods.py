"""Every method the exec-server answers, in one table: what the rest of the project knows of it.

The server's parsers and handlers stay in the server (`ServerCore._methods`, a later family's
`methods()`); this table is the rest: the category a handshake error names and whether the
method is the reference's or execproto's extension (the server reads both from here), whether
the client may send it again after a reconnect, the fields the fuzzer builds calls from, one
valid call for the tests, and a line for the docs (protocol.md's table of methods).

Adding a method is an entry here and its handler; `tests/core/test_methods.py` then names
whatever else is missing: a method served but not listed (or listed but not served), an
extension initialize does not announce, an example its own parser refuses, a kind the fuzzer
cannot draw, a field the bad-input tests do not break. `tests/adapters/test_methods_reference.py`
holds the origins and capability flags to the reference.

Kept to the standard library and loaded late: the server reads it at the first initialize
(the extensions it announces) or handshake error, never on the way to ready.
"""

from __future__ import annotations

from typing import Any, NamedTuple

REFERENCE = "reference"  # the reference server (Codex 0.171) serves it
EXTENSION = "extension"  # execproto's own, named in initialize's "execproto.methods"


class MethodInfo(NamedTuple):
    category: str  # as the handshake errors name it: "using {category} methods"
    origin: str  # REFERENCE or EXTENSION
    # Whether the client may send it again after a reconnect, when the first may or may not
    # have been served: only when serving it twice is the same as serving it once, or when
    # the repeat is refused harmlessly (what lived on the lost connection is gone).
    retry_safe: bool
    # The fuzzer's schema: field -> kind (the kinds of fuzz/fuzz_core.py's VALID and TRICKY);
    # a trailing "?" marks a field a valid call may leave out.
    schema: dict[str, str]
    example: dict[str, Any]  # valid params: the method's parser takes them
    summary: str  # one line, for the docs' table of methods
    # The flag of environmentInfo's "capabilities" that tells a client the server has it ("":
    # no flag names it).
    capability: str = ""


_M = MethodInfo


def _fs(retry_safe: bool, schema: dict[str, str], example: dict[str, Any], summary: str,
        capability: str = "") -> MethodInfo:
    """An fs call of the reference's: each may carry the sandbox it is to run under."""
    return MethodInfo("filesystem", REFERENCE, retry_safe, {**schema, "sandbox": "sandbox?"},
                      example, summary, capability)


_URI = "file:///tmp/x"
_WALK_OPTIONS = {"maxDepth": 2, "maxDirectories": 10, "maxEntries": 100,
                 "followDirectorySymlinks": False}

METHODS: dict[str, MethodInfo] = {
    # -- the handshake: the client core sends these itself on every connection -----------------
    "initialize": _M(
        "handshake", REFERENCE, False,
        {"clientName": "text", "resumeSessionId": "session?", "outputAcks": "bool?"},
        {"clientName": "c"},
        "Open a session, or resume one by id; answers its id and the host's environment."),
    "initialized": _M(
        "handshake", REFERENCE, False, {}, {},
        "Notification that ends the handshake: other calls are refused before it."),
    # -- processes ------------------------------------------------------------------------------
    # A repeated start finds its process there and counts as done.
    "process/start": _M(
        "exec", REFERENCE, True,
        {"processId": "newid", "argv": "argv", "cwd": "uri", "env": "map", "tty": "bool",
         "pipeStdin": "bool?", "arg0": "text?", "envPolicy": "policy?", "rows": "dim?",
         "cols": "dim?", "enforceManagedNetwork": "bool?", "sandbox": "sandbox?"},
        {"processId": "p", "argv": ["sh"], "cwd": "file:///tmp", "env": {}, "tty": False},
        "Start a process: argv, cwd, env or an env policy, pipes or a terminal."),
    "process/read": _M(
        "exec", REFERENCE, True,
        {"processId": "id", "afterSeq": "uint?", "maxBytes": "uint?", "waitMs": "uint?"},
        {"processId": "p"},
        "Read a process's output after a seq, waiting up to waitMs for more; and its exit."),
    # The server skips a writeId it has seen.
    "process/write": _M(
        "exec", REFERENCE, True,
        {"processId": "id", "chunk": "b64", "writeId": "id", "closeStdin": "bool?"},
        {"processId": "p", "chunk": "", "writeId": "w"},
        "Write bytes (base64) to a process's stdin, once per writeId; or close it."),
    # Twice would interrupt twice.
    "process/signal": _M(
        "exec", REFERENCE, False,
        {"processId": "id", "signal": "signal"},
        {"processId": "p", "signal": "interrupt"},
        "Interrupt a process."),
    "process/terminate": _M(
        "exec", REFERENCE, True,
        {"processId": "id"},
        {"processId": "p"},
        "Stop a process and its group: SIGTERM, then SIGKILL after a grace."),
    # Acks only move forward: an ack of a seq acknowledged already changes nothing.
    "process/ack": _M(
        "exec", EXTENSION, True,
        {"processId": "id", "seq": "uint"},
        {"processId": "p", "seq": 1},
        "Acknowledge a process's output up to a seq, so a paused process goes on."),
    "process/resize": _M(
        "exec", EXTENSION, True,
        {"processId": "id", "rows": "dim", "cols": "dim"},
        {"processId": "p", "rows": 24, "cols": 80},
        "Resize a process's terminal."),
    # -- the host -------------------------------------------------------------------------------
    "environment/info": _M(
        "environment info", REFERENCE, True, {}, {},
        "The host's shell, cwd and platform, as initialize announces them."),
    "environment/status": _M(
        "environment status", REFERENCE, True, {}, {},
        "Whether the environment is ready: always `ready` once initialized."),
    # Ending it twice (sent again on a resumed connection) ends it once.
    "session/end": _M(
        "session", EXTENSION, True, {}, {},
        "End the session now: its connection closes and it is gone, not kept for a resume."),
    # Reads, like the fs reads.
    "environmentConfig/read": _M(
        "environment config", REFERENCE, True,
        {"cwd": "uri", "configPaths": "keypaths", "requirementsPaths": "keypaths"},
        {"cwd": "file:///tmp", "configPaths": [["mcp_servers"]], "requirementsPaths": []},
        "The Codex config and requirements layers that apply at a cwd, for the keys asked.",
        "environmentConfigRead"),
    "capabilities/discoverV2": _M(
        "capability discovery", REFERENCE, True,
        {"cwd": "uri", "sandbox": "sandbox?"},
        {"cwd": "file:///tmp"},
        "The skills found from a cwd (plugins: none).", "capabilityDiscoveryV2"),
    "capabilityRoots/discoverV1": _M(
        "capability discovery", REFERENCE, True,
        {"roots": "roots"},
        {"roots": [{"id": "r", "path": "file:///tmp"}]},
        "The skills found under the roots given, each in its own sandbox."),
    # Sent again, a request goes out again: its side effects are the target's.
    "http/request": _M(
        "http", REFERENCE, False,
        {"method": "method", "url": "url", "headers": "headers", "bodyBase64": "b64?",
         "timeoutMs": "uint?", "requestId": "id", "streamResponse": "bool?",
         "redirectPolicy": "redirect?"},
        {"method": "GET", "url": "http://127.0.0.1/", "requestId": "r"},
        "Make an HTTP request from the server's host; the body whole or streamed."),
    # -- files: a handle lives on its connection, so after a reconnect a repeated block call is
    # refused (unknown handle), which is harmless; a repeated open is not (see fs/open) --------
    "fs/readFile": _fs(True, {"path": "uri"}, {"path": _URI}, "Read a whole file (base64)."),
    "fs/writeFile": _fs(
        True, {"path": "uri", "dataBase64": "b64"}, {"path": _URI, "dataBase64": ""},
        "Write a whole file (base64), replacing it."),
    "fs/createDirectory": _fs(
        True, {"path": "uri", "recursive": "bool?"}, {"path": _URI},
        "Create a directory, with its parents unless recursive is false."),
    "fs/getMetadata": _fs(True, {"path": "uri"}, {"path": _URI}, "A path's kind, size and times."),
    "fs/canonicalize": _fs(True, {"path": "uri"}, {"path": _URI}, "The path, links resolved."),
    "fs/readDirectory": _fs(True, {"path": "uri"}, {"path": _URI}, "A directory's entries."),
    "fs/walk": _fs(
        True, {"path": "uri", "options": "walk"}, {"path": _URI, "options": _WALK_OPTIONS},
        "A tree's entries, within depth, directory and entry budgets."),
    # Removing what is gone already is no error (force defaults to true).
    "fs/remove": _fs(
        True, {"path": "uri", "recursive": "bool?", "force": "bool?"}, {"path": _URI},
        "Remove a file or a tree."),
    "fs/copy": _fs(
        True, {"sourcePath": "uri", "destinationPath": "uri", "recursive": "bool"},
        {"sourcePath": _URI, "destinationPath": "file:///tmp/y", "recursive": False},
        "Copy a file or a tree."),
    # On a new connection a repeat would open the handle again (a replace truncating again).
    "fs/open": _fs(
        False, {"handleId": "id", "path": "uri", "mode": "openmode?"},
        {"handleId": "h", "path": _URI},
        "Open a file under a handle the client names, to read or (mode replace) write blocks."),
    "fs/readBlock": _fs(
        True, {"handleId": "id", "offset": "uint", "len": "uint"},
        {"handleId": "h", "offset": 0, "len": 1},
        "Read a block of an open file at an offset."),
    # The same bytes at the same offset.
    "fs/writeBlock": _fs(
        True, {"handleId": "id", "offset": "uint", "chunk": "b64"},
        {"handleId": "h", "offset": 0, "chunk": "aGk="},
        "Write a block to a file opened for replace, at an offset.", "fileWriteStreaming"),
    "fs/close": _fs(
        True, {"handleId": "id"}, {"handleId": "h"},
        "Close a file handle (closing twice is no error)."),
    # A watch lives on its connection: the repeat makes the watch the lost one was.
    "fs/watchMissing": _M(
        "filesystem", REFERENCE, True,
        {"watchId": "uint", "missing": "uris", "present": "uri?"},
        {"watchId": 1, "missing": [_URI]},
        "Watch paths that do not exist yet; fs/missingChanged tells when one appears.",
        "fsWatchMissing"),
    # -- port forwarding: stream ids are per connection and start at 1 on each, so a repeat on
    # the new connection would act on another stream --------------------------------------
    "forward/open": _M(
        "forward", EXTENSION, False,
        {"port": "port", "host": "host?", "sessionId": "session?"},
        {"port": 8080},
        "Open a TCP stream to a port in a session's network."),
    "forward/write": _M(
        "forward", EXTENSION, False,
        {"streamId": "uint", "dataBase64": "b64?", "eof": "bool?"},
        {"streamId": 1, "dataBase64": "aGk="},
        "Write bytes (base64), or the end, to a forward stream."),
    "forward/ack": _M(
        "forward", EXTENSION, False,
        {"streamId": "uint", "seq": "uint"},
        {"streamId": 1, "seq": 1},
        "Acknowledge a forward stream's data up to a seq, opening its window."),
    "forward/close": _M(
        "forward", EXTENSION, False,
        {"streamId": "uint"},
        {"streamId": 1},
        "Close a forward stream."),
}
