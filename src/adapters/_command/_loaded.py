"""What the C library and the dynamic loader load or trust for the server after its start, to
hold read-only in every sandbox with the rest of what it runs (`_own_files`).

A sandbox allowed to write `/` (or a root over /etc or /usr/lib) would otherwise decide what
the server runs without touching a file of its own: every program the server execs as
itself (the wrappers, the stage's interpreter, the cgroup watchdog's tools) is mapped by the
loader, which first reads `/etc/ld.so.preload` (a library named there is loaded into each,
as root for a root server) and `/etc/ld.so.cache` (which file each library name is), then
maps the libraries; and the server itself loads more late: an extension module's libraries
at a late import (libssl for `ssl`, libffi for `ctypes`), a name service module at a lookup
as `/etc/nsswitch.conf` names it (glibc reads that file again when it changes).

Held, as named and at their real paths:

- the loader's files: `/etc/ld.so.preload` (also when missing: the sandbox then finds an
  empty read-only directory there, which the loader ignores), the cache, `/etc/ld.so.conf`
  and `/etc/ld.so.conf.d` (what the host's next `ldconfig` would put in the cache);
- every library the loader maps for those programs and for the standard library's extension
  modules, found as the loader finds them (`_elf`), what the server has mapped now, and the
  libraries a wheel's extension may need of the system (the manylinux list; a wheel carries
  any other in its own folder, on `sys.path`, held already); the directories searched before
  the cache (DT_RUNPATH, DT_RPATH, ``LD_LIBRARY_PATH``), whole, unless a system one;
- the name service's configuration and modules, and the files a name lookup reads: where a
  name resolves decides where a request carrying a secret goes;
- what the stage's interpreter reads at each start to set its locale (the locales, glibc's
  character set modules): a charset names a module to load;
- OpenSSL's configuration (it may load providers and engines, code) and the trust store the
  server's TLS verifies with (`http/request`, the masking proxy's origins): the store's
  directory whole, as OpenSSL looks a certificate up there by its hash at each verification,
  so a file added there would be trusted; and the files the environment names instead.

Not held: the rest of the system's libraries (a sandbox allowed `/` may still install
software), data that decides nothing the server runs or trusts (`/etc/localtime`, the
locale's translations), a name service module that is missing (only for a database the
server never looks up here: `db`, `nis`), and what only the operator's shell reads. Not yet:
the symlinks on the way to what is held (`/lib64` on the way to the loader, `/lib` to every
library the cache names, a library's `.so.N`): the sandbox pins directories and holds
files, not links (test_attack_loader_files.py says so, as an expected failure).
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Iterable, Mapping

from . import _elf

# The loader's own files; the first is held even when missing (see the docstring).
LOADER = ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
MISSING_HELD = ("/etc/ld.so.preload",)
# What a name lookup reads: the switch (which modules), the files and resolver it names.
NAME_SERVICE = ("/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf", "/etc/host.conf",
                "/etc/gai.conf")
# Name service modules glibc carries inside itself: no file is loaded for them.
BUILT_IN_SERVICES = ("files", "dns")
# What a Python started in the C locale reads to coerce it to C.UTF-8 (the stage is one).
LOCALES = ("/usr/lib/locale", "/usr/share/locale/locale.alias")
# The standard library's extension modules of a terminal, a desktop, a local database or
# the interpreter's own tests, which a server never imports: what they need (X11, Tk, curses,
# readline, Kerberos through NIS) is left to what a sandbox may change.
NEVER_IMPORTED = frozenset((
    "_tkinter", "_curses", "_curses_panel", "readline", "_sqlite3", "_dbm", "_gdbm", "nis",
    "_crypt", "spwd", "ossaudiodev", "audioop", "_testcapi", "_testbuffer", "_testclinic",
    "_testimportmultiple", "_testinternalcapi", "_testmultiphase", "_ctypes_test",
    "_xxtestfuzz", "_xxsubinterpreters", "xxlimited", "xxlimited_35", "xxsubtype"))
# Libraries the server loads by name through `ctypes`, maybe after its start (`pyseccomp`
# loads libseccomp when the first sandbox's filter is made), and the program `ctypes.util`
# runs to find them.
BY_NAME = ("libseccomp.so.",)
LDCONFIG = "/sbin/ldconfig"
# The libraries a manylinux wheel may take from the system (PEP 600's list, but for the
# graphics ones and those of old glibc's NIS and crypt).
MANYLINUX = ("libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
             "libutil.so.1", "libgcc_s.so.1", "libstdc++.so.6")
# Where OpenSSL builds look for their configuration and trust store (OPENSSLDIR): Debian's,
# Fedora's, most others', and a source build's.
OPENSSL_DIRS = ("/usr/lib/ssl", "/etc/pki/tls", "/etc/ssl", "/usr/local/ssl")
OPENSSL_FILES = ("openssl.cnf", "cert.pem", "certs")
OPENSSL_ENV = ("OPENSSL_CONF", "SSL_CERT_FILE", "OPENSSL_MODULES", "OPENSSL_ENGINES")


def held(programs: Iterable[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """The paths to hold for ``programs`` (what the server execs, as the files it runs) and
    for the server itself; `MISSING_HELD` among them whether or not it is there."""
    closure = _elf.Closure(library_path=environ.get("LD_LIBRARY_PATH", "").split(":"))
    by_name = [name for name in closure.known if name.startswith(BY_NAME)]
    loaded = [*_mapped(), *_services(closure.known),
              *_from_cache(closure.known, [*MANYLINUX, *by_name])]
    closure.add([*programs, LDCONFIG, *_extension_modules(), *loaded])
    searched = [path for path in closure.directories if path not in closure.system]
    preloaded = environ.get("LD_PRELOAD", "").replace(" ", ":").split(":")
    return [*LOADER, *NAME_SERVICE, *LOCALES, LDCONFIG, _character_sets(closure.files), *loaded,
            *closure.files, *searched, *preloaded, *_tls(environ)]


def _extension_modules() -> list[str]:
    """The standard library's extension modules a late import may load (`ssl`'s, `ctypes`',
    `shutil`'s compressors): the files of its `lib-dynload`, as `sys.path` names it, but
    for `NEVER_IMPORTED`."""
    found = []
    for entry in sys.path:
        if entry.endswith("lib-dynload"):
            found += [path for path in glob.glob(os.path.join(glob.escape(entry), "*.so"))
                      if os.path.basename(path).split(".")[0] not in NEVER_IMPORTED]
    return found


def _mapped() -> list[str]:
    """The libraries the server has mapped now (one `ctypes` loaded, say): executable
    mappings of files, but for a file since deleted (libffi's trampolines)."""
    found: dict[str, None] = {}
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(maxsplit=5)
                if (len(fields) == 6 and "x" in fields[1] and fields[5].startswith("/")
                        and not fields[5].endswith(" (deleted)")):
                    found[fields[5]] = None
    except OSError:
        pass
    return list(found)


def _services(known: dict[str, list[str]]) -> list[str]:
    """The name service modules `/etc/nsswitch.conf` names, where the loader finds them."""
    names: dict[str, None] = {}
    try:
        with open("/etc/nsswitch.conf", encoding="utf-8", errors="replace") as switch:
            for line in switch:
                _, colon, rest = line.partition("#")[0].partition(":")
                for word in rest.split() if colon else ():
                    if not word.startswith("[") and not word.endswith("]"):
                        names[word] = None
    except OSError:
        return []
    return _from_cache(known, (f"libnss_{name}.so.2" for name in names
                               if name not in BUILT_IN_SERVICES))


def _from_cache(known: dict[str, list[str]], names: Iterable[str]) -> list[str]:
    return [path for name in names for path in known.get(name, ())]


def _character_sets(libraries: Iterable[str]) -> str:
    """glibc's character set modules and their list (`gconv-modules.cache`): beside the C
    library, in its `gconv` directory."""
    for path in libraries:
        if os.path.basename(path) == "libc.so.6":
            return os.path.join(os.path.dirname(os.path.realpath(path)), "gconv")
    return ""


def _tls(environ: Mapping[str, str]) -> list[str]:
    """OpenSSL's configuration and the trust stores the server verifies with: its own
    (OPENSSLDIR's), the files the environment names, and those the masking proxy adds."""
    import ssl  # the server loads it anyway: the build's own OPENSSLDIR

    from .._proxy._trust import STARTUP_FILES

    own = os.path.dirname(ssl.get_default_verify_paths().openssl_cafile)
    directories = [*OPENSSL_DIRS, own]
    named = [environ.get(name, "") for name in (*OPENSSL_ENV, *STARTUP_FILES)]
    return [*(os.path.join(directory, name) for directory in directories
              for name in OPENSSL_FILES),
            *named, *environ.get("SSL_CERT_DIR", "").split(os.pathsep)]
