"""Codex's patch format, read and matched without touching a file: what ``apply_patch`` does
to text, as the reference (codex 0.171) does it (measured: tests/adapters/test_apply_patch.py).

The grammar, with the reference's leniencies::

    patch   := "*** Begin Patch" LF hunk* ["*** End Patch" LF blank*] "*** End Patch"
    hunk    := add | delete | update
    add     := "*** Add File: " path LF ("+" line LF)*
    delete  := "*** Delete File: " path LF
    update  := "*** Update File: " path LF ["*** Move to: " path LF] (blank* chunk)+
    chunk   := ["@@" LF | "@@ " context LF] body+ ["*** End of File" LF]
    body    := (" " | "-" | "+") line LF | LF

- The text is trimmed first, and its lines end at LF or CRLF. The Begin and End lines and the
  hunk headers are compared trimmed; an update's Move to, ``@@`` and End of File lines without
  their trailing whitespace.
- Only an update's first chunk may go without its ``@@`` line. Its chunks end at the next
  hunk's header, an End Patch line or a stray End of File line; a chunk ends at a line that is
  none of its own (and the next chunk must then start with ``@@``).
- A patch wrapped in a heredoc (first line ``<<EOF``, ``<<'EOF'`` or ``<<"EOF"``, last line
  ending in ``EOF``) is unwrapped: a model that passes the shell's syntax as an argument.
- Line numbers in errors count the Begin line as 1 (the heredoc's line not counted).

Finding a chunk's old lines in a file tries, in order: exact lines, then lines compared without
trailing whitespace, then without leading and trailing whitespace, then with typographic dashes,
quotes and spaces read as their ASCII ones; the first place that matches wins, searching on
from where the last chunk ended (and only at the very end, for a chunk marked End of File). A
file's lines end at LF, CRLF or a lone CR, and each keeps its own ending; the lines a patch
adds take the file's first one (LF if it has none), and the result always ends with one.

"Whitespace" is Rust's (`char::is_whitespace`), which is not Python's: the reference trims
U+0085 and U+2028 but not the ASCII separators U+001C..U+001F that `str.strip` removes.
"""

from __future__ import annotations

import re
from typing import NamedTuple

WHITESPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
              "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"
CONTEXT = "@@ "
BARE_CONTEXT = "@@"
HEREDOCS = ("<<EOF", "<<'EOF'", '<<"EOF"')
URL_DROPS = str.maketrans("", "", "\t\r\n")
LINE = re.compile(r"([^\r\n]*)(\r\n|\n|\r|\Z)")  # a file's line and its ending

# The last, loosest comparison: typographic punctuation as the ASCII a patch is written in.
PUNCTUATION = str.maketrans({
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
    **dict.fromkeys("\xa0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f"
                    "\u3000", " "),
})


class PatchError(Exception):
    """Why a patch cannot be applied, in the reference's words (its ``str``)."""


class InvalidPatch(PatchError):
    def __init__(self, message: str) -> None:
        super().__init__(f"Invalid patch: {message}")


class InvalidHunk(PatchError):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"Invalid patch hunk on line {line}: {message}")


class Mismatch(PatchError):
    """A chunk's lines, or its ``@@`` context, are not in the file."""


class Chunk(NamedTuple):
    """One ``@@`` section of an update: ``old`` lines replaced by ``new`` ones."""

    context: str | None  # the ``@@ <context>`` line to find first
    old: tuple[str, ...]
    new: tuple[str, ...]
    # (index in old, index in new) of each context line (" x" or empty), both sides' copy of
    # a line the file keeps as it is, ending and all.
    kept: tuple[tuple[int, int], ...]
    end_of_file: bool


class Add(NamedTuple):
    path: str
    contents: str


class Delete(NamedTuple):
    path: str


class Update(NamedTuple):
    path: str
    move_to: str | None
    chunks: tuple[Chunk, ...]


Hunk = Add | Delete | Update


def trim(text: str) -> str:
    return text.strip(WHITESPACE)


def lines_of(text: str) -> list[str]:
    """Rust's `str::lines`: split at LF, with one CR before it dropped, and no empty last
    line."""
    pieces = text.split("\n")
    tail = pieces.pop()  # after the last LF: "" or a last line without one
    return [piece[:-1] if piece.endswith("\r") else piece for piece in pieces] + (
        [tail] if tail else [])


def parse(text: str) -> list[Hunk]:
    """The hunks of a patch, in order; `InvalidPatch` or `InvalidHunk` when it is not one."""
    lines = lines_of(trim(text))
    body = _unwrapped(lines)
    hunks: list[Hunk] = []
    at, number = 0, 2
    while at < len(body):
        if trim(body[at]) == END:
            # An early end: what follows may be blank, and nothing else.
            if any(trim(line) for line in body[at + 1:]):
                raise InvalidPatch(f"The last line of the patch must be '{END}'")
            break
        hunk, used = _hunk(body, at, number)
        hunks.append(hunk)
        at += used
        number += used
    return hunks


def _unwrapped(lines: list[str]) -> list[str]:
    """The lines between the patch's markers, looking inside a heredoc if need be."""
    try:
        return _between_markers(lines)
    except InvalidPatch:
        if len(lines) >= 4 and lines[0] in HEREDOCS and lines[-1].endswith("EOF"):
            return _between_markers(lines[1:-1])
        raise


def _between_markers(lines: list[str]) -> list[str]:
    first = trim(lines[0]) if lines else None
    last = trim(lines[-1]) if lines else None
    if first == BEGIN and last == END:
        return lines[1:-1]
    if first is not None and first != BEGIN:
        raise InvalidPatch(f"The first line of the patch must be '{BEGIN}'")
    raise InvalidPatch(f"The last line of the patch must be '{END}'")


def _hunk(lines: list[str], at: int, number: int) -> tuple[Hunk, int]:
    """The hunk starting at ``lines[at]`` (line ``number`` of the patch), and how many lines
    it took."""
    header = trim(lines[at])
    if header.startswith(ADD):
        end = at + 1
        while end < len(lines) and lines[end].startswith("+"):
            end += 1
        contents = "".join(line[1:] + "\n" for line in lines[at + 1 : end])
        return Add(header[len(ADD):], contents), end - at
    if header.startswith(DELETE):
        return Delete(header[len(DELETE):]), 1
    if header.startswith(UPDATE):
        return _update(lines, at, number, header[len(UPDATE):])
    raise InvalidHunk(f"'{header}' is not a valid hunk header. Valid hunk headers: "
                      "'*** Add File: {path}', '*** Delete File: {path}', "
                      "'*** Update File: {path}'", number)


def _update(lines: list[str], at: int, number: int, path: str) -> tuple[Update, int]:
    end = at + 1
    move_to = None
    if end < len(lines) and (line := lines[end].rstrip(WHITESPACE)).startswith(MOVE):
        move_to = line[len(MOVE):]
        end += 1
    chunks: list[Chunk] = []
    while end < len(lines):
        if not trim(lines[end]):
            end += 1  # a blank line between chunks
            continue
        if _is_header(lines[end]):
            break
        chunk, used = _chunk(lines, end, number + end - at, first=not chunks)
        chunks.append(chunk)
        end += used
    if not chunks:
        raise InvalidHunk(f"Update file hunk for path '{path}' is empty", number)
    return Update(path, move_to, tuple(chunks)), end - at


def _is_header(line: str) -> bool:
    """Whether ``line`` ends an update's chunks: the next hunk's header, the end, or an end of
    file marker out of place."""
    line = line.rstrip(WHITESPACE)
    return line in (END, END_OF_FILE) or line.startswith((ADD, DELETE, UPDATE))


def _chunk(lines: list[str], at: int, number: int, first: bool) -> tuple[Chunk, int]:
    header = lines[at].rstrip(WHITESPACE)
    context: str | None = None
    if header == BARE_CONTEXT:
        start = 1
    elif header.startswith(CONTEXT):
        context, start = header[len(CONTEXT):], 1
    elif first:
        start = 0  # the first chunk may go without its @@ line
    else:
        raise InvalidHunk("Expected update hunk to start with a @@ context marker, got: "
                          f"'{lines[at]}'", number)
    if at + start >= len(lines):
        raise InvalidHunk("Update hunk does not contain any lines", number + 1)
    old: list[str] = []
    new: list[str] = []
    kept: list[tuple[int, int]] = []
    end_of_file = False
    used = 0
    for line in lines[at + start:]:
        if line.rstrip(WHITESPACE) == END_OF_FILE:
            if not used:
                raise InvalidHunk("Update hunk does not contain any lines", number + 1)
            end_of_file = True
            used += 1
            break
        kind = line[:1]
        if kind in ("", " "):
            kept.append((len(old), len(new)))
            old.append(line[1:])
            new.append(line[1:])
        elif kind == "+":
            new.append(line[1:])
        elif kind == "-":
            old.append(line[1:])
        elif not used:
            raise InvalidHunk(f"Unexpected line found in update hunk: '{line}'. Every line "
                              "should start with ' ' (context line), '+' (added line), or '-' "
                              "(removed line)", number + start)
        else:
            break  # the next chunk's @@, say
        used += 1
    return Chunk(context, tuple(old), tuple(new), tuple(kept), end_of_file), used + start


# -- matching ------------------------------------------------------------------------------------


def _exact(line: str) -> str:
    return line


def _without_trailing(line: str) -> str:
    return line.rstrip(WHITESPACE)


def _punctuation(line: str) -> str:
    return trim(line).translate(PUNCTUATION)


# The comparisons, strictest first: the first that finds the lines anywhere wins.
LOOSENINGS = (_exact, _without_trailing, trim, _punctuation)


def seek(lines: list[str], pattern: tuple[str, ...], start: int, end_of_file: bool) -> int | None:
    """Where ``pattern`` is found in ``lines`` at or after ``start`` (only at the very end,
    for ``end_of_file``), or None."""
    if not pattern:
        return start
    if len(pattern) > len(lines):
        return None
    last = len(lines) - len(pattern)
    first = max(last, start) if end_of_file else start
    for loosen in LOOSENINGS:
        wanted = [loosen(line) for line in pattern]
        seen = [loosen(line) for line in lines]
        for at in range(first, last + 1):
            if seen[at : at + len(wanted)] == wanted:
                return at
    return None


class _Line(NamedTuple):
    text: str
    ending: str  # "\n", "\r\n", "\r", or "" for a last line without one


def _split(contents: str) -> list[_Line]:
    """The lines of a file, each with its ending: CRLF, LF, a lone CR, or none (the last)."""
    return [_Line(text, ending) for text, ending in LINE.findall(contents) if text or ending]


def updated(contents: str, chunks: tuple[Chunk, ...], path: str) -> str:
    """``contents`` with ``chunks`` applied; `Mismatch` (naming ``path``) when a chunk's lines
    or context are not there."""
    lines = _split(contents)
    texts = [line.text for line in lines]
    preferred = next((line.ending for line in lines if line.ending), "\n")
    replacements: list[tuple[int, int, tuple[str, ...]]] = []
    at = 0
    for chunk in chunks:
        if chunk.context is not None:
            found = seek(texts, (chunk.context,), at, end_of_file=False)
            if found is None:
                raise Mismatch(f"Failed to find context '{chunk.context}' in {path}")
            at = found + 1
        if not chunk.old:
            replacements.append((len(texts), 0, chunk.new))  # a pure addition goes at the end
            continue
        old, new = chunk.old, chunk.new
        found = seek(texts, old, at, chunk.end_of_file)
        if found is None and old[-1] == "":
            # A last empty line stands for the file's final newline, which is no line here.
            old = old[:-1]
            if new and new[-1] == "":
                new = new[:-1]
            found = seek(texts, old, at, chunk.end_of_file)
        if found is None:
            raise Mismatch(f"Failed to find expected lines in {path}:\n" + "\n".join(chunk.old))
        replacements += _around_kept(found, old, new, chunk.kept)
        at = found + len(old)
    replacements.sort(key=lambda replacement: replacement[0])
    return _joined(lines, replacements, preferred)


def _around_kept(found: int, old: tuple[str, ...], new: tuple[str, ...],
                 kept: tuple[tuple[int, int], ...]) -> list[tuple[int, int, tuple[str, ...]]]:
    """The replacements of one chunk found at ``found``, leaving its context lines alone (so
    that they keep their own endings)."""
    out = []
    old_start = new_start = 0
    for old_at, new_at in kept:
        if old_at >= len(old) or new_at >= len(new):
            break  # the final empty line dropped above
        if (old_start, new_start) != (old_at, new_at):
            out.append((found + old_start, old_at - old_start, new[new_start:new_at]))
        old_start, new_start = old_at + 1, new_at + 1
    if (old_start, new_start) != (len(old), len(new)):
        out.append((found + old_start, len(old) - old_start, new[new_start:]))
    return out


def _joined(lines: list[_Line], replacements: list[tuple[int, int, tuple[str, ...]]],
            preferred: str) -> str:
    out: list[_Line] = []
    done = 0
    for start, length, segment in replacements:
        out += lines[done:start]
        out += [_Line(text, preferred) for text in segment]
        done = max(done, start + length)
    out += lines[done:]
    # An update always ends its last line, and an insertion moved inward gets one too.
    return "".join(line.text + (line.ending or preferred) for line in out)


def resolved(cwd: str, path: str) -> str:
    """``path`` against the absolute ``cwd``, with ``.``, ``..`` and repeated slashes taken
    out by name alone (as the reference does: ``link/..`` is the directory that holds ``link``,
    wherever the link leads). Tabs and CRs are dropped from ``path``, as the reference's
    parsing of it as a URL drops them."""
    path = path.translate(URL_DROPS)
    parts: list[str] = []
    for part in (path if path.startswith("/") else f"{cwd}/{path}").split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/" + "/".join(parts)


def summary(added: list[str], modified: list[str], deleted: list[str]) -> str:
    """What a successful patch prints: each path as the patch spelled it."""
    return "Success. Updated the following files:\n" + "".join(
        f"{mark} {path}\n" for mark, paths in (("A", added), ("M", modified), ("D", deleted))
        for path in paths)
