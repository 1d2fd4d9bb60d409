"""The help texts read as plain words, and every option says what it is for."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from execproto.adapters import cli

COMMANDS = [[], ["serve"], ["exec"], ["replay"]]

# An entry of a help section: two spaces, then an option or a name, then (after two spaces or
# more) its description, unless that starts on the next line.
ENTRY = re.compile(r"^  (?P<name>\S.*?)(?:\s{2,}(?P<text>\S.*))?$")


def help_text(command: list[str]) -> str:
    done = subprocess.run([sys.executable, "-m", "execproto.adapters", *command, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def undescribed(text: str) -> list[str]:
    """The entries of the help's sections that have no text of their own."""
    missing = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = ENTRY.match(line)
        if match is None or line.startswith("   ") or not _in_a_section(lines, index):
            continue
        after = lines[index + 1] if index + 1 < len(lines) else ""
        if match["text"] is None and not re.match(r"^\s{6,}\S", after):
            missing.append(line.strip())
    return missing


def _in_a_section(lines: list[str], index: int) -> bool:
    """Whether line ``index`` is under an "options:"-like heading (not in usage or prose)."""
    for line in reversed(lines[:index]):
        if line and not line.startswith(" "):
            return line.endswith(":") and not line.startswith("usage:")
    return False


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "execproto")
def test_help_is_plain_words_with_every_option_described(command: list[str]) -> None:
    text = help_text(command)
    assert "``" not in text, text
    assert "options:" in text
    assert undescribed(text) == [], text


def test_the_loose_parse_finds_an_option_without_words() -> None:
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--bare")
    parser.add_argument("--told", help="something")
    assert undescribed(parser.format_help()) == ["--bare BARE"]


@pytest.mark.parametrize("name", ["execproto", "serve", "exec", "replay"])
def test_every_action_has_help(name: str) -> None:
    top = cli._parser()
    parser = top if name == "execproto" else top.commands[name]
    for action in parser._actions:
        assert action.help and action.help is not argparse.SUPPRESS, (name, action.dest)
        assert "``" not in action.help, (name, action.dest)
    assert parser.description and "``" not in parser.description, name
