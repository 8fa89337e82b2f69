import os
import sys
from pathlib import Path

import pytest

try:
    import ratelimiter  # noqa: F401  (the installed package, as run_tests.sh runs it)
except ImportError:
    if os.environ.get("RL_REQUIRE_INSTALLED"):
        raise
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One node and a router shared by a module's tests (each test uses its own users)."""
    harness.need_binaries("rl-node", "rl-router")
    c = harness.Cluster(tmp_path_factory.mktemp("cluster")).start()
    yield c
    c.stop()


@pytest.fixture
def fresh_cluster(tmp_path):
    """A cluster of its own, for tests that kill or stop processes."""
    harness.need_binaries("rl-node", "rl-router")
    c = harness.Cluster(tmp_path / "cluster").start()
    yield c
    c.stop()
