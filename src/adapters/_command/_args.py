"""What the commands' parsers convert their arguments with, shared by `cli` and `_auth_flags`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def file_path(text: str) -> Path:
    """A FILE argument, as a `Path`. pathlib is imported where one is given, not to build the
    parser: ~1 ms of every server's start otherwise."""
    from pathlib import Path

    return Path(text)
