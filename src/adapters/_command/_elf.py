"""What the dynamic loader loads for a program: its ELF facts, the loader's cache, and the
libraries a program needs, found as glibc's loader finds them.

Read, never run: the server asks no loader (`ldd` would run one per program) and imports
nothing to learn what an import would load. Each file is read only as far as its program
headers, its dynamic section and that section's strings, so a few hundred files take a few
milliseconds. A file that is not ELF, or is malformed, counts as needing nothing.

The search is the loader's (glibc `dl-load.c`): a name with a slash is that path; otherwise
the object's DT_RPATH (when it has no DT_RUNPATH), ``LD_LIBRARY_PATH``, its DT_RUNPATH, the
cache (`/etc/ld.so.cache`, every entry of that name: the loader picks among them by
architecture and hardware capabilities), then the system directories.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import BinaryIO

CACHE = "/etc/ld.so.cache"
_CACHE_MAGIC = b"glibc-ld.so.cache1.1"
_CACHE_HEADER = 48  # magic and version (20), nlibs, len_strings, flags and padding, extension
_CACHE_ENTRY = 24  # flags, key, value, osversion, hwcap
MAX_CACHE = 16 << 20  # bytes of the cache read at most
MAX_HEADERS = 512  # program headers read at most from one file
MAX_DYNAMIC = 4096  # dynamic entries read at most
MAX_STRINGS = 1 << 30  # bytes of the dynamic string table, at most
MAX_STRING = 4096  # bytes of one name or search path, at most
MAX_FILES = 4096  # objects a closure visits at most

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 15, 29
WANTED = frozenset((DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH))


class Facts:
    """One ELF file's loader-facing facts: its interpreter (PT_INTERP), the libraries it
    needs (DT_NEEDED) and where it asks them to be looked for first."""

    def __init__(self, interpreter: str, needed: list[str], rpath: list[str],
                 runpath: list[str]) -> None:
        self.interpreter = interpreter
        self.needed = needed
        self.rpath = rpath
        self.runpath = runpath


def read(path: str) -> Facts | None:
    """The facts of the ELF file at ``path``, None if it is none (or cannot be read)."""
    try:
        with open(path, "rb") as file:
            return _parse(file)
    except (OSError, struct.error, ValueError, UnicodeDecodeError):
        return None


def _parse(file: BinaryIO) -> Facts | None:
    head = file.read(64)
    if head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    wide = head[4] == 2
    order = "<" if head[5] == 1 else ">"
    if wide:
        (phoff,) = struct.unpack_from(order + "Q", head, 32)
        size, count = struct.unpack_from(order + "HH", head, 54)
        shape = order + "IIQQQQQQ"  # type, flags, offset, vaddr, paddr, filesz, memsz, align
    else:
        (phoff,) = struct.unpack_from(order + "I", head, 28)
        size, count = struct.unpack_from(order + "HH", head, 42)
        shape = order + "IIIIIIII"  # type, offset, vaddr, paddr, filesz, memsz, flags, align
    if size < struct.calcsize(shape) or count > MAX_HEADERS:
        return None
    file.seek(phoff)
    table = file.read(size * count)
    loads: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
    interpreter, dynamic = "", (0, 0)
    for index in range(len(table) // size):
        fields = struct.unpack_from(shape, table, index * size)
        if wide:
            kind, _, offset, vaddr, _, filesz = fields[:6]
        else:
            kind, offset, vaddr, _, filesz = fields[:5]
        if kind == PT_LOAD:
            loads.append((vaddr, filesz, offset))
        elif kind == PT_DYNAMIC:
            dynamic = (offset, filesz)
        elif kind == PT_INTERP and 0 < filesz < 4096:
            file.seek(offset)
            interpreter = file.read(filesz).split(b"\0", 1)[0].decode()
    entries = _dynamic(file, dynamic, order + ("qQ" if wide else "iI"))
    strtab = _offset(loads, entries.get(DT_STRTAB, [0])[0])
    if strtab is None:
        return Facts(interpreter, [], [], [])
    end = min(entries.get(DT_STRSZ, [MAX_STRING])[0], MAX_STRINGS)

    def text(at: int) -> str:
        """The string at ``at`` in the table, read alone: the table holds every symbol's
        name too, megabytes in a large library."""
        if not 0 <= at < end:
            raise ValueError("a string beyond its table")
        file.seek(strtab + at)
        data = file.read(min(MAX_STRING, end - at))
        return data[:data.index(b"\0")].decode()

    return Facts(interpreter, [text(at) for at in entries.get(DT_NEEDED, [])],
                 [part for at in entries.get(DT_RPATH, []) for part in text(at).split(":")],
                 [part for at in entries.get(DT_RUNPATH, []) for part in text(at).split(":")])


def _dynamic(file: BinaryIO, where: tuple[int, int], shape: str) -> dict[int, list[int]]:
    """The dynamic section's entries, by tag, up to DT_NULL."""
    offset, length = where
    entries: dict[int, list[int]] = {}
    if not length:
        return entries
    step = struct.calcsize(shape)
    file.seek(offset)
    data = file.read(min(length, step * MAX_DYNAMIC))
    for tag, value in struct.iter_unpack(shape, data[:len(data) - len(data) % step]):
        if tag == DT_NULL:
            break
        if tag in WANTED:
            entries.setdefault(tag, []).append(value)
    return entries


def _offset(loads: list[tuple[int, int, int]], address: int) -> int | None:
    """The file offset of the virtual ``address`` (a loaded segment holds it)."""
    for vaddr, filesz, offset in loads:
        if vaddr <= address < vaddr + filesz:
            return address - vaddr + offset
    return None


def cache(path: str = CACHE) -> dict[str, list[str]]:
    """The loader's cache: each library name with the paths it may load for it."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CACHE)
    except OSError:
        return {}
    at = data.find(_CACHE_MAGIC)  # after the old format's table, on a cache that keeps both
    if at < 0 or len(data) < at + _CACHE_HEADER:
        return {}
    order = "<" if struct.pack("=H", 1) == b"\x01\x00" else ">"  # the host's, as ldconfig's
    (count,) = struct.unpack_from(order + "I", data, at + 20)
    found: dict[str, list[str]] = {}

    def text(offset: int) -> str:
        start = at + offset  # relative to the new format's header
        return data[start:data.index(b"\0", start)].decode(errors="surrogateescape")

    for index in range(min(count, (len(data) - at - _CACHE_HEADER) // _CACHE_ENTRY)):
        _, key, value = struct.unpack_from(order + "iII", data,
                                           at + _CACHE_HEADER + index * _CACHE_ENTRY)
        try:
            found.setdefault(text(key), []).append(text(value))
        except ValueError:
            continue
    return found


def system_directories(known: dict[str, list[str]]) -> list[str]:
    """Where the loader looks last: the multiarch directories its own C library sits in, and
    the usual ones."""
    multiarch = [os.path.dirname(path) for path in known.get("libc.so.6", [])]
    usual = ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    return list(dict.fromkeys([*multiarch, *usual]))


class Closure:
    """Every file the loader may map for some programs, and the directories it searches
    that a file dropped in would be taken from (DT_RPATH, DT_RUNPATH, ``LD_LIBRARY_PATH``)."""

    def __init__(self, library_path: Iterable[str] = (), cache_path: str = CACHE) -> None:
        self.files: dict[str, None] = {}  # as named (by the cache, PT_INTERP), in order met
        self.directories: dict[str, None] = {}
        self.known = cache(cache_path)
        self.system = system_directories(self.known)
        self._library_path = [entry for entry in library_path if entry]
        self._seen: set[tuple[int, int]] = set()  # the files read, by device and inode
        self._met: set[str] = set()  # the paths met, as named
        self._found: dict[tuple[str, tuple[str, ...]], list[str]] = {}

    def add(self, paths: Iterable[str]) -> None:
        """``paths`` (programs, libraries, extension modules) and all they need."""
        todo = [path for path in paths if path]
        while todo and len(self._seen) < MAX_FILES:
            path = todo.pop()
            if path in self._met:
                continue
            self._met.add(path)
            try:
                status = os.stat(path)
            except OSError:
                continue
            if (status.st_dev, status.st_ino) in self._seen:
                continue
            self._seen.add((status.st_dev, status.st_ino))
            facts = read(path)
            if facts is None:
                continue
            if facts.interpreter:
                self.files[facts.interpreter] = None
                todo.append(facts.interpreter)
            rpath = [] if facts.runpath else _expand(facts.rpath, path)
            runpath = _expand(facts.runpath, path)
            self.directories.update(dict.fromkeys([*rpath, *self._library_path, *runpath]))
            for name in facts.needed:
                for found in self._find(name, [*rpath, *self._library_path, *runpath]):
                    self.files[found] = None
                    todo.append(found)

    def _find(self, name: str, first: list[str]) -> list[str]:
        """Where ``name`` is loaded from: the first directory of ``first`` that has it, else
        every cache entry of that name, else the first system directory that has it."""
        key = (name, tuple(first))
        if key not in self._found:
            self._found[key] = self._search(name, first)
        return self._found[key]

    def _search(self, name: str, first: list[str]) -> list[str]:
        if "/" in name:
            return [name]
        for directory in first:
            if os.path.exists(os.path.join(directory, name)):
                return [os.path.join(directory, name)]
        cached = [path for path in self.known.get(name, []) if os.path.exists(path)]
        if cached:
            return cached
        for directory in self.system:
            if os.path.exists(os.path.join(directory, name)):
                return [os.path.join(directory, name)]
        return []


def _expand(entries: list[str], path: str) -> list[str]:
    """DT_RPATH or DT_RUNPATH entries of the object at ``path``, with ``$ORIGIN`` (the real
    directory of the object) put in; other tokens are left out."""
    found = []
    origin = os.path.dirname(os.path.realpath(path)) if any("$" in e for e in entries) else ""
    for entry in entries:
        entry = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        if entry and "$" not in entry and os.path.isabs(entry):
            found.append(os.path.normpath(entry))
    return found
