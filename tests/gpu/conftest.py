"""tests/gpu's own hook: each test's setup and call seconds appended to KERNELMILL_TEST_DURATIONS as the test ends, so
that a device call cut at its limit still says where its minutes went (pytest's ``--durations`` prints only at the
end), and each failure's text beside it. Written by the controller only under pytest-xdist; bench/gpu_check.sh sets the file under $OUT.

test_testbed_gpu.py is a run over the fetched test bed of model-written solutions (ext/testbed, never committed:
bench/testbed_build.py builds it), so it is collected only where ``KERNELMILL_TESTBED`` names its manifest; the tier
(``pytest -m gpu tests/gpu``) is the other files, whole, with nothing skipped."""

import os

import pytest

collect_ignore = [] if os.environ.get("KERNELMILL_TESTBED", "").strip() else ["test_testbed_gpu.py"]

# The order the files start in under pytest-xdist (bench/gpu_check.sh: ``--dist loadfile --no-loadscope-reorder``),
# by their seconds in a whole run (bench/results/durations_gpu_*.tsv), the longest first, so that no long file starts
# last: xdist's default order is by number of tests, and at a6b853a test_binding_gpu.py (2 tests, 276 s: the
# longest) started last, after about 175 s, and the run passed its 375 s cap. One exception: xdist gives a worker
# whose file holds two tests or fewer a second file at once (its heuristic of two pending tests), so the binding
# file comes after the five longest, with a file of small tests as its second. A file not listed here starts after
# all of them: list a new file by its seconds (tests/test_gpu_tier_order.py asks that every file is).
FILE_ORDER = (
    "redteam/test_redteam_gpu.py",  # 209 s at a6b853a (one H100, six workers)
    "test_verifier_gpu.py",  # 176 s
    "redteam/test_redteam_partial_gpu.py",  # 149 s
    "test_precision_gpu.py",  # 145 s
    "redteam/test_redteam_graphs_gpu.py",  # 126 s
    "test_binding_gpu.py",  # 276 s (two tests: its second file follows at once)
    "redteam/test_redteam_ties_gpu.py",  # 14 s
    "test_trust_gpu.py",  # 90 s
    "test_build_fallback_gpu.py",  # 88 s
    "test_sandbox_gpu.py",  # 53 s
    "redteam/test_redteam_fidelity_gpu.py",  # 42 s
    "redteam/test_redteam_omnipotent_gpu.py",  # 34 s
    "redteam/test_redteam_timed_inputs_gpu.py",  # 22 s
    "test_testbed_gpu.py",  # only with KERNELMILL_TESTBED (a run over the fetched test bed)
)


_RANK = {f"tests/gpu/{name}": i for i, name in enumerate(FILE_ORDER)}


def pytest_collection_modifyitems(config, items):
    """The GPU tier's files in ``FILE_ORDER`` (each file's tests in their own order; unlisted files of the tier after
    them, tests outside the tier before it, as they were)."""
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return _RANK.get(path, len(FILE_ORDER)) if path.startswith("tests/gpu/") else -1

    items.sort(key=rank)


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
