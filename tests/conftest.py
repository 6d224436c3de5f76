"""Shared fixtures. GPU tests (tests/gpu, marker ``gpu``) are skipped where CUDA is absent."""

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Before anything imports prefect: a private Prefect home and kernelmill state dir per test session,
# so tests never touch the user's profile, database or "latest run".
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="kernelmill-tests-"))
os.environ["PREFECT_HOME"] = str(_SESSION_TMP / "prefect")
os.environ["KERNELMILL_HOME"] = str(_SESSION_TMP / "kernelmill")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


@pytest.fixture(scope="session")
def prefect_server():
    """One ephemeral Prefect server (with its own SQLite database) for the whole test session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; run `pytest -m gpu` on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
