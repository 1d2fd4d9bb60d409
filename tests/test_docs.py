"""The README and docs/ are held to the code: every synopsis and flag table to the command
line's parser, every block marked runnable run as pasted, every relative link to a file (and
heading) that exists. How to mark a block is in docs/contributing.md, "Runnable examples".

The checks are functions of the docs' text, so the last tests here feed them a broken copy
(a flag renamed, a link to nowhere) and see each one object."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from execproto.adapters.cli import _parser

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).with_name("docs_runner.py")
# The commands whose synopsis the docs show (a ```text block after <!-- usage: NAME -->), and
# those with a table of every flag (after <!-- flags: NAME -->).
SYNOPSES = ("serve", "exec", "forward", "replay", "apply_patch")
FLAG_TABLES = ("serve", "exec", "forward")
# Markers a runnable block may carry, and the setting tests/docs_runner.py gives it.
RUNNABLE = {"runnable": "alone", "runnable: server": "server",
            "runnable: server with token": "server with token"}
LANGUAGES = ("sh", "python")

FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"<!-- (.*?) -->")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@attrs.frozen
class Block:
    page: str  # relative to the root
    line: int
    language: str
    text: str
    markers: tuple[str, ...]  # the HTML comments on the lines just before its fence

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(root: Path) -> Iterator[Block]:
    for page in pages(root):
        text = page.read_text()
        for fence in FENCE.finditer(text):
            before = text[:fence.start()].splitlines()
            markers: list[str] = []
            while before and (found := COMMENT.fullmatch(before[-1].strip())):
                markers.insert(0, found[1])
                before.pop()
            yield Block(str(page.relative_to(root)), text.count("\n", 0, fence.start()) + 1,
                        fence[1], fence[2], tuple(markers))


def marked(root: Path, kind: str) -> dict[str, list[Block]]:
    """``<!-- kind: NAME -->`` blocks by NAME."""
    found: dict[str, list[Block]] = {}
    for block in blocks(root):
        for marker in block.markers:
            if marker.startswith(kind + ": "):
                found.setdefault(marker.removeprefix(kind + ": "), []).append(block)
    return found


def commands() -> dict[str, argparse.ArgumentParser]:
    return _parser().commands


def words(text: str) -> list[str]:
    return text.split()


def synopsis_problems(root: Path) -> list[str]:
    """Each command's usage block must be what its --help prints (wrapping aside)."""
    shown = marked(root, "usage")
    problems = [f"no synopsis of {name} (<!-- usage: {name} -->)" for name in SYNOPSES
                if name not in shown]
    parsers = commands()
    for name, found in shown.items():
        if name not in parsers:
            problems.append(f"{found[0].name}: there is no command {name}")
            continue
        for block in found:
            if words(block.text) != words(parsers[name].format_usage()):
                problems.append(f"{block.name}: the synopsis of {name} is not its --help's:\n"
                                f"{parsers[name].format_usage()}")
    return problems


def flag_tables(root: Path) -> dict[str, list[tuple[str, set[str]]]]:
    """Each ``<!-- flags: NAME -->`` table's flags (the first cell's first word), by NAME."""
    found: dict[str, list[tuple[str, set[str]]]] = {}
    for page in pages(root):
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            marker = re.fullmatch(r"<!-- flags: (\S+) -->", line.strip())
            if not marker:
                continue
            rows = []
            for row in lines[number + 1:]:
                if not row.startswith("|"):
                    break
                rows.append(row)
            flags = {cell.strip().strip("`").split()[0] for cell in
                     (row.split("|")[1] for row in rows[2:])}
            found.setdefault(marker[1], []).append((f"{page.relative_to(root)}:{number + 1}",
                                                    flags))
    return found


def flag_problems(root: Path) -> list[str]:
    """Every flag --help lists is in the command's table, and the table names no other."""
    tables = flag_tables(root)
    problems = [f"no table of {name}'s flags (<!-- flags: {name} -->)" for name in FLAG_TABLES
                if name not in tables]
    parsers = commands()
    for name, found in tables.items():
        actions = parsers[name]._actions
        listed = {action.option_strings[0] for action in actions
                  if action.option_strings and action.help != argparse.SUPPRESS
                  and "--help" not in action.option_strings}
        for where, flags in found:
            if flags - listed:
                problems.append(f"{where}: not flags of {name}: {sorted(flags - listed)}")
            if listed - flags:
                problems.append(f"{where}: {name}'s flags missing: {sorted(listed - flags)}")
    return problems


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def link_problems(root: Path) -> list[str]:
    """Every relative link leads to a file that exists, and to a heading in it if it names one."""
    problems = []
    for page in pages(root):
        text = FENCE.sub("", page.read_text())
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            name = f"{page.relative_to(root)}: {target}"
            if not where.exists():
                problems.append(f"{name}: no such file")
            elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
                problems.append(f"{name}: no such heading")
    return problems


def performance_tables(root: Path) -> list[list[str]]:
    """The table of `bench/compare.py --table` in the README and in docs/performance.md."""
    found = []
    for page in (root / "README.md", root / "docs" / "performance.md"):
        rows = [line for line in page.read_text().splitlines()
                if line.startswith("| figure |") or line.startswith("| stream, 256 MiB")
                or re.match(r"\| (server CPU|start → closed|200 starts|peak RSS|idle RSS|"
                            r"sandboxed start|cold start)", line)]
        found.append(rows)
    return found


def test_synopses_are_the_commands_help() -> None:
    assert synopsis_problems(ROOT) == []


def test_flag_tables_list_every_flag_and_no_other() -> None:
    assert flag_problems(ROOT) == []


def test_relative_links_lead_somewhere() -> None:
    assert link_problems(ROOT) == []


def test_the_readme_shows_the_performance_table_of_docs_performance() -> None:
    readme, page = performance_tables(ROOT)
    assert len(readme) > 5
    assert readme == page


def methods_table(root: Path) -> list[str]:
    """The rows of protocol.md's table of methods (after its marker comment)."""
    text = (root / "docs" / "protocol.md").read_text()
    marker = "<!-- methods table: generated from execproto._methods -->"
    if marker not in text:
        return []
    table = text.split(marker, 1)[1].strip().split("\n\n", 1)[0]
    return table.splitlines()[2:]  # under its header


def registry_rows() -> list[str]:
    from execproto._methods import METHODS

    return [f"| `{name}` | {info.summary} | {info.origin} | "
            f"{'yes' if info.retry_safe else 'no'} |" for name, info in METHODS.items()]


def test_the_table_of_methods_is_the_registrys() -> None:
    """Regenerate it with the rows `registry_rows` makes, when a method is added."""
    assert methods_table(ROOT) == registry_rows()


# Running the blocks: those of one setting together, in a network namespace of their own.

def _namespace() -> list[str] | None:
    """How to enter a new network namespace here, or None."""
    if not shutil.which("unshare"):
        return None
    for command in (["unshare", "-n"], ["unshare", "-rn"]):
        try:
            if subprocess.run([*command, "true"], capture_output=True, timeout=10).returncode == 0:
                return command
        except subprocess.TimeoutExpired:
            pass
    return None


def runnable(root: Path) -> list[Block]:
    return [block for block in blocks(root)
            if any(marker.startswith("runnable") for marker in block.markers)]


@attrs.frozen
class Ran:
    code: int
    output: str


def setting(block: Block) -> str:
    (chosen,) = [RUNNABLE[marker] for marker in block.markers if marker in RUNNABLE]
    return chosen


def run_blocks(namespace: list[str], chosen: str, group: list[Block]) -> list[Ran]:
    """Blocks of one setting, in one namespace (one server, when they want one), each in a
    directory of its own."""
    bin_dir = str(Path(sys.executable).parent)  # where `execproto` is installed
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    with tempfile.TemporaryDirectory(prefix="execproto-docs-") as where:
        places = [Path(where, str(number)) for number in range(len(group))]
        for place, block in zip(places, group, strict=True):
            place.mkdir()
            (place / ("block." + {"sh": "sh", "python": "py"}[block.language])).write_text(
                block.text)
        done = subprocess.run([*namespace, sys.executable, str(RUNNER), chosen,
                               *map(str, places)],
                              cwd=where, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return [Ran(int((place / "status").read_text()), (place / "output").read_text())
                for place in places]


BLOCKS = runnable(ROOT)
# Run beside them, to see that a block that fails is seen failing (under sh -e, a failing
# command before the last one).
FAILING = Block("failing.md", 1, "sh", "false\ntrue\n", ("runnable",))


@pytest.fixture(scope="module")
def ran() -> dict[str, Ran]:
    namespace = _namespace()
    if namespace is None:
        pytest.skip("the runnable examples need a network namespace of their own "
                    "(unshare -n, as root or with user namespaces)")
    groups: dict[str, list[Block]] = {}
    for block in [*BLOCKS, FAILING]:
        if sum(marker in RUNNABLE for marker in block.markers) == 1:  # else a test says so
            groups.setdefault(setting(block), []).append(block)
    # One namespace a setting, side by side: each has its own 127.0.0.1:8765.
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        results = pool.map(lambda item: run_blocks(namespace, *item), groups.items())
        return {block.name: result for group, found in zip(groups.values(), results, strict=True)
                for block, result in zip(group, found, strict=True)}


def test_blocks_are_marked_so_they_can_run() -> None:
    """A marker the runner does not know, or a language it cannot run, is a mistake."""
    assert len(BLOCKS) >= 8
    for block in BLOCKS:
        settings = [marker for marker in block.markers if marker.startswith("runnable")]
        assert settings and all(marker in RUNNABLE for marker in settings), block.name
        assert block.language in LANGUAGES, block.name


@pytest.mark.parametrize("name", [block.name for block in BLOCKS])
def test_the_runnable_example_runs_as_pasted(ran: dict[str, Ran], name: str) -> None:
    assert ran[name].code == 0, ran[name].output


# The checks must object to what they are for.

def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    (copy / "docs").mkdir(parents=True)
    for page in pages(ROOT):
        shutil.copy(page, copy / page.relative_to(ROOT))
    for linked in ("deploy", "LICENSE"):
        target = ROOT / linked
        (copy / linked).symlink_to(target)
    return copy


def test_the_checks_object_to_a_renamed_flag_and_a_broken_link(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    serving = copy / "docs" / "serving.md"
    text = serving.read_text()
    serving.write_text(text.replace("`--drain-grace SECONDS`", "`--drain-time SECONDS`")
                       .replace("[--drain-grace SECONDS]", "[--drain-time SECONDS]")
                       .replace("(security.md#limits)", "(security.md#limit)")
                       .replace("(embedding.md#spawn-backends)", "(embeding.md)"))
    assert any("--drain-time" in problem for problem in flag_problems(copy))
    assert any("--drain-grace" in problem for problem in flag_problems(copy))
    assert any("synopsis of serve" in problem for problem in synopsis_problems(copy))
    assert {problem.split(": ", 2)[2] for problem in link_problems(copy)} == {
        "no such heading", "no such file"}


def test_a_failing_block_fails(ran: dict[str, Ran]) -> None:
    assert ran[FAILING.name].code == 1, ran[FAILING.name].output
