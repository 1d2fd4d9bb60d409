"""What the server tells clients about this machine (``environment/info``), read once at start."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from execproto import Host, uri_from_path

VERSION = "0.1.0"

# The reference reports these capability flags; a client that parses them strictly needs every
# key present. execproto offers none of the features they announce, so each is false.
_CAPABILITIES = (
    "networkProxyLaunch",
    "networkProxyReviewDomains",
    "networkProxyTransparentTcp",
    "credentialMasking",
    "credentialMaskingCustomProviders",
    "capabilityDiscoverySandbox",
    "fsWatchMissing",
    "capabilityDiscoveryV2",
    "environmentConfigRead",
    "httpHeaderEnvVars",
    "sandboxedFileStreaming",
    "fileWriteStreaming",
    "shellSnapshotV2",
    "windowsMxc",
    "linuxRootWritePreservesDevices",
    "linuxApprovedRootWritePreservesRestrictions",
)


def _shell() -> dict[str, str]:
    path = os.environ.get("SHELL") or shutil.which("bash") or "/bin/sh"
    return {"name": os.path.basename(path), "path": path}


def environment_info() -> dict[str, Any]:
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
        "capabilities": {name: False for name in _CAPABILITIES},
    }


def this_host() -> Host:
    return Host(environment_info=environment_info(), env=dict(os.environ))
