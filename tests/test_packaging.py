"""Every package folder is in the wheel: a new folder under ``src/`` that pyproject.toml does not
list passes every test from the checkout and is missing from an installed server."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def folders() -> set[str]:
    """The packages under src/, named as pyproject.toml's package-dir maps them."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for name, where in setuptools["package-dir"].items():
        for init in (ROOT / where).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / where).parts
            if "__pycache__" not in relative:
                found.add(".".join([name, *relative]))
    return found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    assert folders() == listed
