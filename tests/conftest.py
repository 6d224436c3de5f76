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
# On the 2-core CI machine building a ~0.8 GB precompiled header per cflags set (three in this suite) costs
# more than it saves over the suite's few dozen builds: off here, except in tests/test_verifier_build.py,
# which builds one and checks it is used, and on GPU boxes, where tests/gpu checks the fast build paths.
if not os.environ.get("CUDA_VISIBLE_DEVICES") and not Path("/dev/nvidiactl").exists():
    os.environ.setdefault("KM_NO_PCH", "1")


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
