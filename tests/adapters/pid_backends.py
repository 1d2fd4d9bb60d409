"""Backends for `--backend`: a LocalBackend with each pid namespace choice."""

from __future__ import annotations

from execproto.adapters.backends import LocalBackend


def isolate() -> LocalBackend:
    return LocalBackend(pid_namespace="isolate")


def inherit() -> LocalBackend:
    return LocalBackend(pid_namespace="inherit")
