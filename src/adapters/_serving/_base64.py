"""The base64 encoder the core's output goes through (`Config.b64encode`).

The core keeps to the stdlib's binascii, some 600 MB/s on one core here: half the server's time
on a stream. pybase64 (SIMD, a dependency of the adapters) is some 50x that, and gives the same
bytes. Without it (a host that could not install it), the stdlib's serves, only slower.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from execproto import Config

# The core's own encoder: a config that still has it gets the fast one.
_STDLIB = attrs.fields(Config).b64encode.default


def fast_encoder() -> Callable[[bytes], bytes] | None:
    """pybase64's encoder, or None when it cannot be imported."""
    try:
        from pybase64 import b64encode
    except ImportError:
        return None
    return b64encode


def with_fast_base64(config: Config) -> Config:
    """``config`` with the fast encoder, unless its embedder chose one or there is none."""
    if config.b64encode is not _STDLIB:
        return config
    fast = fast_encoder()
    return config if fast is None else attrs.evolve(config, b64encode=fast)
