"""A sandbox policy, for the adapter that carries it out.

The core decides what a request may do (`Policy`, narrowed by the operator's floor); an
adapter enforces it: with bubblewrap's mounts, and by checking each path an ``fs/*`` call
opens. What it needs of the rules is here: the rules themselves, how accesses rank, the rule
that governs a path, the shell patterns of denied paths, matched as the core matches them, and
the rules taken to their real paths without trusting a symlink a sandbox could have planted.
"""

from __future__ import annotations

from ._globs import ANY_DIRECTORIES, Globs, denies, name_matches, parts
from ._links import PlantedLink, Readlink, crossing, follow, pinned, refusal
from ._policy import RANK, PathRule, Policy, deepest

__all__ = ["ANY_DIRECTORIES", "RANK", "Globs", "PathRule", "PlantedLink", "Policy", "Readlink",
           "crossing", "deepest", "denies", "follow", "name_matches", "parts", "pinned",
           "refusal"]
