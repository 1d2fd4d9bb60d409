"""Why a sandbox cannot be set up as asked (`CannotEnforce`): raised wherever its plan is made
(`_bwrap`, `_ways`), and turned by the backend into its refusal of the start
(`_backend.Refused`: the client gets -32602 and nothing runs). A module of its own so that each
of those can raise it without importing the other.
"""

from __future__ import annotations


class CannotEnforce(Exception):
    """The policy names more than this sandbox can set up (the spawn is refused)."""
