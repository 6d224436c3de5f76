"""tests/gpu's own hook: each test's setup and call seconds appended to KERNELMILL_TEST_DURATIONS as the test ends, so
that a device call cut at its limit still says where its minutes went (pytest's ``--durations`` prints only at the
end), and each failure's text beside it. Written by the controller only under pytest-xdist; bench/gpu_check.sh sets the file under $OUT.

test_testbed_gpu.py is a run over the fetched test bed of model-written solutions (ext/testbed, never committed:
bench/testbed_build.py builds it), so it is collected only where ``KERNELMILL_TESTBED`` names its manifest; the tier
(``pytest -m gpu tests/gpu``) is the other files, whole, with nothing skipped."""

import os

import pytest

collect_ignore = [] if os.environ.get("KERNELMILL_TESTBED", "").strip() else ["test_testbed_gpu.py"]


def pytest_runtest_logreport(report):
    path = os.environ.get("KERNELMILL_TEST_DURATIONS")
    if not path or os.environ.get("PYTEST_XDIST_WORKER") or report.when not in ("setup", "call"):
        return
    with open(path, "a") as f:
        f.write(f"{report.duration:.1f}\t{report.when}\t{report.outcome}\t{report.nodeid}\n")
    if report.failed:
        # the failure's own text as it ends too (beside the durations file), for the same reason
        with open(os.path.splitext(path)[0] + "_failures.txt", "a") as f:
            f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n\n")


@pytest.fixture(scope="module", autouse=True)
def _kept_processes_given_back():
    """After each module, the processes its verifiers kept for a next batch end (verifier/workers.py ``end_kept``):
    ten pytest workers sharing one H200 kept about a hundred CUDA contexts alive from modules long over, and a
    child's first profiler session then failed 'out of memory' with 40 GiB of the device free (97db09e, fd1dc1d)."""
    yield
    from verifier.workers import end_kept

    end_kept()
