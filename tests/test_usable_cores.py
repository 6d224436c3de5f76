"""The compile pool's default size is the cores this process may run on (its CPU affinity), not the host's count:
one verifier per GPU under ``taskset`` starts as many compilers as it has cores."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_compile_pool_defaults_to_the_cores_of_the_process_affinity(tmp_path):
    one = sorted(os.sched_getaffinity(0))[0]
    code = (
        "import os\n"
        f"os.sched_setaffinity(0, {{{one}}})\n"
        "from verifier.build.pool import CompilePool\n"
        "from verifier.common.config import usable_cores\n"
        f"pool = CompilePool({str(tmp_path)!r})\n"
        "print(usable_cores(), pool.workers, os.cpu_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    cores, workers, host = (int(x) for x in out.stdout.split())
    assert cores == workers == 1, f"one core allowed, {workers} compilers started ({host} on the host)"
