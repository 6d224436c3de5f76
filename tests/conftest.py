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
# One directory for the whole run, shared by pytest-xdist's workers (they inherit this variable from the controller,
# which makes the directory and removes it when the run ends): the default build root and the precompiled headers.
_RUN_DIR = os.environ.get("KERNELMILL_TESTS_RUN_DIR", "")
_OWNS_RUN_DIR = not _RUN_DIR
if _OWNS_RUN_DIR:
    _RUN_DIR = tempfile.mkdtemp(prefix="kernelmill-tests-run-")
    os.environ["KERNELMILL_TESTS_RUN_DIR"] = _RUN_DIR
# The precompiled header of torch/extension.h (verifier/build/pch.py) is on, as outside the suite, in the run's own
# directory (never the user's ~/.cache): on the 2-core machine a CPU extension builds in ~10 s against it and ~23 s
# without, and the header (~30 s, ~0.75 GB per cflags set) is paid once per flag set in the run.
os.environ.setdefault("KERNELMILL_VERIFY_PCH_DIR", str(Path(_RUN_DIR) / "pch"))
# Under pytest-xdist (``make test`` runs two workers) each worker imports this file and so has a KERNELMILL_HOME,
# and with it a default build root, of its own: the honest fixtures that several modules build would be compiled
# once per worker. So the default build root is one directory for the run (``_RUN_DIR``), which the workers share
# safely: a build is keyed by content and compiled under an flock on its key's directory
# (verifier/build/pool.py), and the object cache and the kept reference timings lock per entry (verifier/build/objcache.py,
# verifier/judge/prep_cache.py). It is the same path in every worker, as the built module's recorded path must be for a
# sandboxed child of either worker to load it. A test that gives a build_dir of its own is unaffected.
# tests/gpu on a host of several GPUs (KERNELMILL_TEST_GPUS=4 with -n 4): each xdist worker gets one GPU and its share
# of the cores, set here before anything initialises CUDA, so the workers' timings do not share a device
_GPUS = int(os.environ.get("KERNELMILL_TEST_GPUS", "0") or 0)
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _GPUS > 1 and _WORKER.startswith("gw"):
    _k = int(_WORKER[2:])
    os.environ["CUDA_VISIBLE_DEVICES"] = str(_k % _GPUS)
    _cores = sorted(os.sched_getaffinity(0))
    _share = max(1, len(_cores) // _GPUS)
    os.sched_setaffinity(0, _cores[(_k % _GPUS) * _share:(_k % _GPUS + 1) * _share] or _cores)
os.environ.setdefault("KERNELMILL_VERIFY_BUILD_DIR", str(Path(_RUN_DIR) / "verify-builds"))


_PREWARM: list = []  # the header-making process the controller started (pytest_configure), if any


def _whole_suite(config) -> bool:
    """This process is pytest-xdist's controller of a run over the whole suite (``make test``: no paths given, or
    ``tests``), not a worker, a plain run or a run of some files."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return False
    here = Path(config.invocation_params.dir)
    return all((here / a).resolve() == ROOT / "tests" for a in config.args) if config.args else True


def pytest_configure(config):
    """A whole-suite run under pytest-xdist makes the precompiled headers of the flag sets its builds use most in a
    process of its own from the start (tests/pch_prewarm.py says why: a build that finds its header being made
    compiles without it, about four times the CPU). ``KERNELMILL_TESTS_PREWARM=0`` turns it off."""
    if not _OWNS_RUN_DIR or not _whole_suite(config) or os.environ.get("KERNELMILL_TESTS_PREWARM", "1") == "0":
        return
    import subprocess

    log = open(Path(_RUN_DIR) / "pch_prewarm.log", "w")
    _PREWARM.append(subprocess.Popen([sys.executable, str(ROOT / "tests" / "pch_prewarm.py")], cwd=ROOT,
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    log.close()


def pytest_unconfigure(config):
    """The process that made the run's directory (pytest-xdist's controller, or the one process of a plain run)
    removes it once every test is over (and the header-making process it started, should that still run)."""
    if _OWNS_RUN_DIR and not hasattr(config, "workerinput"):
        import shutil

        for proc in _PREWARM:
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
        shutil.rmtree(_RUN_DIR, ignore_errors=True)


def _verify_defaults_from_the_environment() -> None:
    """The ``KERNELMILL_VERIFY_<KEY>`` variables reach what the settings layer loads (the CLI, flows) by
    themselves; here they also become the defaults of every VerifyConfig a test builds in code (a key it passes
    still wins), so that the suite's ``[verify] pch_dir`` and build root hold there too. The dataclass's own defaults
    (``dataclasses.fields``, what data/default.toml repeats) are unchanged."""
    import dataclasses

    from kernelmill.config import load_settings
    from verifier.common.config import VerifyConfig

    given = load_settings(env={k: v for k, v in os.environ.items() if k.startswith("KERNELMILL_VERIFY_")}).verify
    changed = {f.name: getattr(given, f.name) for f in dataclasses.fields(VerifyConfig)
               if getattr(given, f.name) != f.default}
    if changed:
        init = VerifyConfig.__init__

        def __init__(self, **kw):
            init(self, **{**changed, **kw})

        VerifyConfig.__init__ = __init__


_verify_defaults_from_the_environment()


@pytest.fixture
def with_pch():
    """A config whose builds use the precompiled header (``[verify] pch = true``, as every config of the suite): a
    test's builds pass its ``host()``; its ``pch_root()`` is the header cache directory (the run's)."""
    from verifier.common.config import VerifyConfig

    return VerifyConfig(pch=True)


@pytest.fixture(scope="session")
def shared_build_dir() -> str:
    """The session's verifier build root (the default one, which the verify stage, serve-verifier and every
    VerifyConfig without a build_dir use too: under the session's KERNELMILL_HOME, or the run's one under
    pytest-xdist, above). Builds are content-addressed by sources, flags and torch version, and failures are
    cached with their log (verifier/build/pool.py), so modules whose extensions are honest fixtures
    (bench/lib/fixtures.py) share this root instead of compiling the same sources again in a root of their own,
    and keep the fork servers that a new build root would restart. A test that asserts a cold build, or on what
    a build root holds (tests/test_verifier_run.py, test_verifier_build.py, test_prep_cache.py,
    test_run_cost.py), keeps a root of its own."""
    from verifier.common.config import VerifyConfig

    root = VerifyConfig().build_root()
    root.mkdir(parents=True, exist_ok=True)
    return str(root)


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
