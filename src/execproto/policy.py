"""A sandbox policy, for the adapter that carries it out.

The core decides what a request may do (`Policy`, narrowed by the operator's floor); an
adapter enforces it: with bubblewrap's mounts, and by checking each path an ``fs/*`` call
opens. What it needs of the rules is here: the rules themselves, how accesses rank, the rule
that governs a path, and the shell patterns of denied paths, matched as the core matches them.
"""

from __future__ import annotations

from ._globs import ANY_DIRECTORIES, denies, name_matches, parts
from ._policy import RANK, PathRule, Policy, deepest

__all__ = ["ANY_DIRECTORIES", "RANK", "PathRule", "Policy", "deepest", "denies", "name_matches",
           "parts"]
