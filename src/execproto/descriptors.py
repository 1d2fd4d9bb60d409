"""The descriptor budget: how many file descriptors the configured limits need, so that the
command line can raise ``ulimit -n`` to it, or say it stays short."""

from __future__ import annotations

from ._descriptors import PER_PROCESS, budget

__all__ = ["PER_PROCESS", "budget"]
