import pytest

from .harness import Harness


@pytest.fixture
def h() -> Harness:
    """A core with one connection that has completed the handshake."""
    harness = Harness()
    harness.connect(1)
    harness.handshake(1)
    return harness
