"""The GPU tier's files start longest first under pytest-xdist (tests/gpu/conftest.py ``FILE_ORDER``, with
bench/gpu_check.sh's ``--no-loadscope-reorder``): every file of tests/gpu is ranked there, and a collection of the
tier comes in that order (at a6b853a xdist's own order, by number of tests, started the longest file last and the
run passed its cap)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "tests" / "gpu"


def _conftest():
    spec = importlib.util.spec_from_file_location("gpu_tier_conftest", GPU / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_file_of_the_tier_has_its_place():
    order = _conftest().FILE_ORDER
    files = sorted(str(p.relative_to(GPU)) for p in GPU.rglob("test_*.py"))
    assert [f for f in files if f not in order] == []
    assert len(set(order)) == len(order) and [f for f in order if f not in files] == []


def test_the_tier_is_collected_in_that_order():
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/gpu"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    seen = []
    for line in out.stdout.splitlines():
        if line.startswith("tests/gpu/") and "::" in line:
            path = line.split("::", 1)[0][len("tests/gpu/"):]
            if not seen or seen[-1] != path:
                seen.append(path)
    order = [f for f in _conftest().FILE_ORDER if f in seen]
    assert seen == order, seen
    assert len(seen) >= 10
