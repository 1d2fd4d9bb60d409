import pytest

from .harness import Harness

# The lifecycle fixtures `make_world` and `w` for every test here; `x as x` marks a re-export.
from .lifecycle_world import make_world_fixture as make_world_fixture
from .lifecycle_world import w_fixture as w_fixture


@pytest.fixture
def h() -> Harness:
    """A core with one connection that has completed the handshake."""
    harness = Harness()
    harness.connect(1)
    harness.handshake(1)
    return harness
