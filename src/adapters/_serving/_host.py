"""What the server tells clients about this machine (``environment/info``), read once at start."""

from __future__ import annotations

import os
import resource
from typing import Any

from execproto import Host, uri_from_path

from .._system import which

VERSION = "0.1.0"

# The reference reports these capability flags, and a client that parses them strictly needs
# every key. Each says whether execproto offers what it announces (docs/protocol.md,
# "Capabilities"): the client sends a newer request, or a newer field, only to an executor that
# says it can.
_CAPABILITIES = {
    # process/start's networkProxy (and its reviewDomains): true where the backend launches
    # the proxy (`LocalBackend.network_proxy`: bubblewrap works, so a sandbox's proxy is all
    # of its network); see `environment_info`.
    "networkProxyLaunch": False,
    "networkProxyReviewDomains": False,
    # and TCP from programs that ignore its variables: `LocalBackend.network_proxy_transparent`
    "networkProxyTransparentTcp": False,
    # the proxy as a credential broker (`_proxy._masking`), where it launches and the
    # `cryptography` package is there for its CA
    "credentialMasking": False,
    "credentialMaskingCustomProviders": False,
    # discovery scans each root under the sandbox sent with it: test_discovery_sandbox.py
    "capabilityDiscoverySandbox": True,
    "fsWatchMissing": True,  # fs/watchMissing and fs/missingChanged
    "capabilityDiscoveryV2": True,  # capabilities/discoverV2 (skills of $CODEX_HOME/skills)
    "environmentConfigRead": True,  # environmentConfig/read
    "httpHeaderEnvVars": True,  # http/request headers taking values from the environment
    "sandboxedFileStreaming": True,  # fs/open streams obey the sandbox: test_fs_stream_parity.py
    "fileWriteStreaming": True,  # fs/open mode "replace" and fs/writeBlock
    "shellSnapshotV2": True,  # process/start's shellSnapshot
    "windowsMxc": False,
    # a writable root keeps /dev, /dev/shm, /dev/pts and terminals, its read-only and denied
    # paths, and refuses a restriction through a replaceable link: test_root_write_devices.py
    "linuxRootWritePreservesDevices": True,
    "linuxApprovedRootWritePreservesRestrictions": True,
}


def _shell() -> dict[str, str]:
    path = os.environ.get("SHELL") or which("bash") or "/bin/sh"
    return {"name": os.path.basename(path), "path": path}


def environment_info(network_proxy: bool = False, transparent: bool = False) -> dict[str, Any]:
    # Asked where the core is made (its first client's connection), not at every start.
    import importlib.util
    import tempfile

    capabilities = {**_CAPABILITIES, "networkProxyLaunch": network_proxy,
                    "networkProxyReviewDomains": network_proxy,
                    "networkProxyTransparentTcp": network_proxy and transparent}
    masking = network_proxy and importlib.util.find_spec("cryptography") is not None
    capabilities["credentialMasking"] = capabilities["credentialMaskingCustomProviders"] = masking
    return {
        "shell": _shell(),
        "executorVersion": VERSION,
        "providerId": "execproto",
        "cwd": uri_from_path(os.getcwd()),
        "userHomeDir": uri_from_path(os.path.expanduser("~")),
        "platformOs": "linux",
        "prependPathDirs": [],
        "temporaryDirectories": [],
        "tempDir": uri_from_path(tempfile.gettempdir()),
        "capabilities": capabilities,
    }


# What `execproto serve` raises its soft descriptor limit to, when the hard limit allows: room for
# every process and connection the default limits allow (Config, _descriptors). No higher,
# because the processes it runs inherit the limit, and some programs walk every possible
# descriptor when they start.
WANTED_DESCRIPTORS = 8192


def raise_descriptor_limit(wanted: int = WANTED_DESCRIPTORS) -> int:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (never above the hard limit, never
    lower than it is); the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def descriptor_limit() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def this_host(network_proxy: bool = False, transparent: bool = False) -> Host:
    """This machine; ``network_proxy``: the backend launches the managed network proxy,
    ``transparent``: with transparent TCP."""
    return Host(environment_info=environment_info(network_proxy, transparent),
                env=dict(os.environ),
                descriptor_limit=descriptor_limit())
