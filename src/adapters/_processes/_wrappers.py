"""What the backend decides about the wrappers before any is run: their fixed environment, and
the pid namespace a sandbox may have. Apart from `_bwrap` so that a server's start (which checks
``--sandbox-pid-namespace`` and finds nft and nsenter on this PATH) need not load the sandbox's
modules: they load when the probe of bubblewrap runs, or at the first sandboxed start.
"""

from __future__ import annotations

# The wrappers' whole environment: nothing a client chose. The C locale: the stage server's
# interpreter then reads no locale nor glibc's character set modules to coerce it to C.UTF-8
# (strace: locale.alias, C.utf8/LC_CTYPE, gconv-modules.cache without it; its file names are
# UTF-8 all the same, in Python's UTF-8 mode), nor do bubblewrap, pasta and nft.
WRAPPER_ENV = (("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), ("LC_ALL", "C"))
WRAPPER_PATH = WRAPPER_ENV[0][1]

# The pid namespace, the reference's `--linux-sandbox-pid-namespace`: a sandbox's own
# ("isolate": it sees and signals only its own processes), or the host's ("inherit": its
# /proc lists the host's processes and it may signal those of its user; for a host that is
# the sandbox's alone). Its processes stay in their cgroup either way, killed with it.
PID_NAMESPACES = {"isolate": ("--unshare-pid",), "inherit": ()}
