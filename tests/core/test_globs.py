"""Deny patterns' one meaning (`execproto._globs`), as a table and against a naive matcher."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from execproto._globs import denies, matches, parts

TABLE = [
    ("/w/**/*.env", "/w/.env", True),  # ** is zero directories too; dot files are names
    ("/w/**/*.env", "/w/a/b/app.env", True),
    ("/w/*.env", "/w/a/app.env", False),  # * stays within one name
    ("/w/*.env", "/w/app.env", True),
    ("/w/sub/*", "/w/sub/deep", True),
    ("/w/sub/*", "/w/sub/deep/x", False),  # matched itself only; `denies` covers beneath
    ("/w/**", "/w", True),
    ("/w/**/deep/**", "/w/a/deep/x/y", True),
    ("/w/[ab].txt", "/w/b.txt", True),
    ("/w/?.txt", "/w/ab.txt", False),
    ("/w/./a", "/w/a", True),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), TABLE)
def test_the_table(pattern: str, path: str, expected: bool) -> None:
    assert matches(pattern, path) is expected


def test_a_matched_directory_denies_what_it_holds() -> None:
    assert denies(["/w/sub/*"], "/w/sub/deep/x")
    assert denies(["/w/sub/*"], "/w/sub/deep")
    assert not denies(["/w/sub/*"], "/w/sub")
    assert not denies([], "/w/sub")


def _naive(wanted: tuple[str, ...], names: tuple[str, ...]) -> bool:
    if not wanted:
        return not names
    if wanted[0] == "**":
        return _naive(wanted[1:], names) or (bool(names) and _naive(wanted, names[1:]))
    return (bool(names) and fnmatch.fnmatchcase(names[0], wanted[0])
            and _naive(wanted[1:], names[1:]))


NAMES = st.sampled_from(["a", "b", ".a", "ab", "a.env"])
PARTS = st.sampled_from(["a", "b", "*", "**", "?", "*.env", ".*", "[ab]"])


@given(st.lists(PARTS, max_size=6), st.lists(NAMES, max_size=6))
def test_the_table_of_reach_agrees_with_the_naive_search(wanted: list[str],
                                                         names: list[str]) -> None:
    pattern, path = "/" + "/".join(wanted), "/" + "/".join(names)
    assert matches(pattern, path) == _naive(parts(pattern), parts(path))


def test_many_double_stars_cost_no_exponential_search() -> None:
    pattern = "/" + "/".join(["**"] * 60 + ["never"])
    assert not matches(pattern, "/" + "/".join(["a"] * 60))
