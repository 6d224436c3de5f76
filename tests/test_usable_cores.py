"""The compile pool's default size is the cores this process may run on (its CPU affinity), not the host's count:
one verifier per GPU under ``taskset`` starts as many compilers as it has cores."""

import os
import subprocess
import sys
from pathlib import Path

from kernelmill.settings import CUDA_SLOTS_MAX

ROOT = Path(__file__).resolve().parents[1]


def test_the_compile_pool_defaults_to_the_cores_of_the_process_affinity(tmp_path):
    one = sorted(os.sched_getaffinity(0))[0]
    code = (
        "import os\n"
        f"os.sched_setaffinity(0, {{{one}}})\n"
        "from verifier.build.pool import CompilePool\n"
        "from verifier.common.config import VerifyConfig, usable_cores\n"
        f"pool = CompilePool({str(tmp_path)!r}, host=VerifyConfig().host())\n"
        "print(usable_cores(), pool.workers, os.cpu_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    cores, workers, host = (int(x) for x in out.stdout.split())
    assert cores == workers == 1, f"one core allowed, {workers} compilers started ({host} on the host)"



def test_execution_workers_default_to_the_device_and_the_cores():
    """``[verify] exec_workers = 0`` (the default): cpu, half the usable cores and at least one (one on the 2-core
    machines, as before); cuda, several per GPU (at least 2, at most 6), their memory admitted by the plan's bytes
    and their timing taking turns on the device lock. A number set is used as it is."""
    import pytest

    from kernelmill.errors import InputError
    from verifier.common.config import VerifyConfig

    allowed = sorted(os.sched_getaffinity(0))
    code = (
        "import os\n"
        "from verifier.common.config import VerifyConfig, usable_cores\n"
        f"for n in (1, {len(allowed)}):\n"
        f"    os.sched_setaffinity(0, set({allowed}[:n]))\n"
        "    print(usable_cores(), VerifyConfig().exec_slots('cpu'), VerifyConfig().exec_slots('cuda'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    one, every = (tuple(int(x) for x in line.split()) for line in out.stdout.splitlines())
    assert one == (1, 1, 2)
    n = len(allowed)
    assert every == (n, max(1, n // 2), max(2, min(CUDA_SLOTS_MAX, n // 2)))
    assert VerifyConfig().exec_workers == 0
    assert VerifyConfig(exec_workers=3).exec_slots("cpu") == VerifyConfig(exec_workers=3).exec_slots("cuda") == 3
    with pytest.raises(InputError, match="exec_workers"):
        VerifyConfig(exec_workers=-1).check()
