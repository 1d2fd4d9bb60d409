"""Spawn backends: how a requested process becomes the local command that runs it.

A backend's `prepare` turns the request into an `ExecSpec` (the argv, environment and cwd to
spawn here, plus an opaque token), or refuses it with `Refused` (the client gets -32602 and
nothing runs). Its `finalize(token, status, exit_code, timed_out)` is called exactly once for
every successful `prepare`, only after the process is closed (every pipe at EOF, or abandoned):
``status`` is "completed" with the exit code, or "failed" with None when the spawn failed. A
finalize that raises is logged and shown as the process's ``failure``; it never stops the server.

Give your own on the command line as ``--backend module:factory``: ``factory()`` returns the
backend (a docker or ssh one, say; see the README).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from execproto import SpawnSpec

from ._posix import resolve_program


class Refused(Exception):
    """The backend cannot run this request as asked (the message says what it cannot enforce)."""


@attrs.frozen(kw_only=True)
class ExecSpec:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str
    arg0: str | None = None
    token: Any = None


class Backend(Protocol):
    sandbox_type: str

    def prepare(self, request: SpawnSpec) -> ExecSpec: ...

    def finalize(self, token: Any, status: str, exit_code: int | None, timed_out: bool) -> None: ...


class LocalBackend:
    """Runs the argv as given, on this machine."""

    sandbox_type = "none"

    def prepare(self, request: SpawnSpec) -> ExecSpec:
        return ExecSpec(argv=request.argv, env=request.env, cwd=request.cwd, arg0=request.arg0)

    def finalize(self, token: Any, status: str, exit_code: int | None, timed_out: bool) -> None:
        pass


class BwrapBackend:
    """Runs each process inside bubblewrap: the filesystem read-only except the writable roots,
    no network unless allowed, its own pid namespace, and killed when its bwrap parent dies."""

    sandbox_type = "bwrap"

    def __init__(self, writable_roots: Sequence[str] = (), allow_network: bool = False) -> None:
        self._bwrap = shutil.which("bwrap")
        if self._bwrap is None:
            raise RuntimeError("--sandbox bwrap needs bubblewrap (the bwrap command), not found")
        probe = subprocess.run([self._bwrap, "--ro-bind", "/", "/", "--unshare-pid", "true"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            raise RuntimeError(f"bubblewrap cannot run here: {probe.stderr.strip()}")
        self._roots = [os.path.realpath(root) for root in writable_roots]
        self._allow_network = allow_network

    def prepare(self, request: SpawnSpec) -> ExecSpec:
        env = dict(request.env)
        program = resolve_program(request.argv[0], env, request.cwd)  # spawn errors stay exact
        assert self._bwrap is not None
        argv = [self._bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for root in self._roots:
            argv += ["--bind", root, root]
        argv += ["--unshare-pid", "--die-with-parent", "--chdir", request.cwd]
        if not self._allow_network:
            argv.append("--unshare-net")
        argv.append("--")
        if request.arg0 is not None:  # bwrap cannot rename argv[0]; bash's exec -a can
            argv += ["/bin/bash", "-c", 'exec -a "$0" "$@"', request.arg0, program]
            argv += request.argv[1:]
        else:
            argv += request.argv
        return ExecSpec(argv=tuple(argv), env=request.env, cwd=request.cwd)

    def finalize(self, token: Any, status: str, exit_code: int | None, timed_out: bool) -> None:
        pass


def load(spec: str) -> Backend:
    """A backend from ``module:factory`` (``factory()`` returns it)."""
    module_name, _, factory = spec.partition(":")
    if not module_name or not factory:
        raise ValueError(f"--backend must be module:factory, got {spec!r}")
    backend = getattr(importlib.import_module(module_name), factory)()
    for needed in ("prepare", "finalize"):
        if not callable(getattr(backend, needed, None)):
            raise ValueError(f"{spec} made {backend!r}, which has no {needed}()")
    return backend  # type: ignore[no-any-return]
