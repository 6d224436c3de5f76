"""Red team of PyTorch compute called from the candidate's C++ where no monitor in its process sees it run
(docs/ANTI_CHEAT.md class 38).

The dispatch monitor is a TorchDispatchMode: its state is the calling thread's, so ATen called on a ``std::thread``
or an OpenMP team the extension starts is not recorded, and a dispatch-key guard switches it off on the calling
thread; the profiler watches every thread, but it runs on the correctness trials only (the timed calls run under
the dispatch monitor alone). And neither sees a process the extension forks. A candidate whose C++ computes with
``torch::matmul`` on a thread only on the timed calls (it tells them apart by its inputs' layout: views into the
harness's pool), or in a forked process on every call, passed the strict policy: the binary scan read the
``at::_ops::matmul`` import outside the process, but only noted it, leaving the decision to the monitors.

Closed at the root by letting the scan outside the process decide: ATen compute ops the built extension imports are
PyTorch compute in forward, as the static scan's findings are (verifier/engine.py ``w.binary_torch``,
verifier/judge/verdict.py ``_legality_outcome``): under the strict policy C01 where a monitor saw PyTorch compute,
C19 where none did, whatever thread, process or guard ran it; the partial policy leaves them to the knockout. The
binary cannot say which exported function reaches an import, so an ATen helper forward never calls is C19 under
strict too (the strict policy's rule for a PyTorch path that never ran) and passes partial. Honest twin: C++ that
only allocates (``torch::zeros``, ``torch::empty_like``) and computes in its own loops, on threads of its own,
passes.

Since the thirteenth session every timed call is profiled on every thread as a trial is (verifier/child/worker.py), so
the routes that compute on the timed calls only are seen at run time as well, and their verdicts say so first ("Runtime
check of the timed runs"); the binary's reading stays the decision for the routes no monitor in the process sees (a
forked process, a dispatch-key guard) and is recorded in ``versions["binary"]`` for all of them.
"""

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch

NAIVE = """
#include <torch/extension.h>
#include <thread>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstring>
#include <omp.h>
""" + fx.NAIVE_MM_CPP

ROUTES = {
    # PyTorch's matmul on a worker thread on the timed calls only (their inputs are views into the pool)
    "matmul_on_a_thread_when_timed": r'''
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    const bool pooled = a.storage_offset() != 0 || a.storage().nbytes() != (size_t)a.nbytes();
    if (!pooled) return naive_mm(a, b);
    torch::Tensor out;
    std::thread worker([&] { out = torch::matmul(a.contiguous(), b.contiguous()); });
    worker.join();
    return out;
}
''',
    # PyTorch's mm in a forked process on every call, the result handed back through shared memory
    "mm_in_a_forked_process": r'''
torch::Tensor mm(torch::Tensor a_in, torch::Tensor b_in) {
    auto a = a_in.contiguous(), b = b_in.contiguous();
    const int64_t M = a.size(0), N = b.size(1);
    const size_t bytes = (size_t)M * N * sizeof(float);
    void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(shared != MAP_FAILED, "mmap failed");
    pid_t pid = fork();
    if (pid == 0) {
        auto c = torch::mm(a, b);
        std::memcpy(shared, c.data_ptr<float>(), bytes);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    auto out = torch::empty({M, N}, a.options());
    std::memcpy(out.data_ptr<float>(), shared, bytes);
    munmap(shared, bytes);
    return out;
}
''',
    # PyTorch's mm on a worker of its own OpenMP team, only on the calls after the extra shape (the timed ones)
    "mm_on_an_openmp_worker_when_timed": r'''
static int64_t first_rows = -1;
static bool seen_other = false;
torch::Tensor mm(torch::Tensor a_in, torch::Tensor b_in) {
    auto a = a_in.contiguous(), b = b_in.contiguous();
    const int64_t M = a.size(0), N = b.size(1);
    if (first_rows < 0) first_rows = M;
    if (M != first_rows) seen_other = true;
    if (!(seen_other && M == first_rows)) return naive_mm(a, b);
    auto out = torch::empty({M, N}, a.options());
    #pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 1) at::mm_out(out, a, b);
    }
    return out;
}
''',
    "honest_own_loops_on_a_thread": r'''
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    torch::Tensor out;
    std::thread worker([&] { out = naive_mm(a, b); });
    worker.join();
    return out;
}
''',
    "aten_helper_forward_never_calls": r'''
torch::Tensor mm(torch::Tensor a, torch::Tensor b) { return naive_mm(a, b); }
torch::Tensor mm_reference(torch::Tensor a, torch::Tensor b) { return torch::matmul(a, b); }  // for debugging
''',
}


def _candidate(route: str) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""{NAIVE + ROUTES[route]}"""
ext = load_inline(name="mm_routes", cpp_sources=SRC, functions=["mm"{', "mm_reference"' if "never_calls" in route else ""}],
                  extra_cflags=["-O2", "-fopenmp"], extra_ldflags=["-lgomp"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.mm(a, b)
'''


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    task = Task.from_code(fx.MATMUL_TASK, name="binmm", source="seed", level=1)
    out = {}
    for legality in ("strict", "partial"):
        cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=3, warmup=1, time_torch_compile=False,
                           run_timeout_s=90, memory_limit_gb=4, exec_workers=1, legality=legality)
        routes = list(ROUTES) if legality == "strict" else ["aten_helper_forward_never_calls"]
        items = [(task, Candidate(candidate_id=r, task_id=task.task_id, backend="cpu", generator="redteam",
                                  code=_candidate(r))) for r in routes]
        out[legality] = dict(zip(routes, verify_batch(items, config=cfg, compile_workers=1)))
    return out


@pytest.mark.parametrize("route", list(ROUTES))
def test_pytorch_compute_the_extension_imports_is_judged_outside_its_process(verdicts, route):
    v = verdicts["strict"][route]
    if route.startswith("honest"):
        assert v.status == "pass" and v.cheats == [] and v.pass_strict, (v.status, v.cheats, v.feedback[:600])
        assert "binary" not in v.versions, v.versions.get("binary")
        return
    assert v.status == "cheat" and v.pass_strict is False, (v.status, v.cheats, v.feedback[:600])
    if route == "mm_in_a_forked_process":  # the fork itself is caught at run time first (class 82: the waited-for
        # process's CPU time in the trials, C17), beside or before the binary's PyTorch compute
        assert {cheats.C01, cheats.C19, cheats.C17} & set(v.cheats), v.cheats
        assert any(op in v.versions["binary"]["aten_compute_imports"] for op in ("aten::matmul", "aten::mm")), v.versions
        return
    assert {cheats.C01, cheats.C19} & set(v.cheats), v.cheats
    # the routes on the timed calls only are seen at run time too since every timed call is profiled on every thread
    # (tests/redteam/test_redteam_timed_routes.py): the runtime's line decides first there; the binary's evidence,
    # read outside the process, is recorded in the verdict either way
    seen_when_timed = route.endswith("_when_timed") and "Runtime check of the timed runs" in v.feedback
    assert seen_when_timed or "Binary check: your extension calls PyTorch compute ops from C++" in v.feedback, \
        v.feedback[:800]
    assert any(op in v.versions["binary"]["aten_compute_imports"] for op in ("aten::matmul", "aten::mm")), v.versions
    if route == "aten_helper_forward_never_calls":  # never ran: C19, and the partial policy does not count it
        assert v.cheats == [cheats.C19], v.cheats
        p = verdicts["partial"][route]
        assert p.status == "pass" and p.pass_partial and p.pass_strict is False, (p.status, p.cheats, p.feedback[:600])


def test_glibcs_vector_math_under_fast_math_is_the_c_runtime(tmp_path):
    """(docs/ANTI_CHEAT.md class 69) GCC turns a loop of expf / log1pf into calls of glibc's vector math library
    (libmvec) under -O3 -ffast-math, the flags frontier models put on CPU answers, and the module then links
    libmvec.so.1: an honest softplus was C01 ("a library outside the C/C++ runtimes"). libmvec is libm's code and is
    linkable as libm is; a library of another's compute still is not."""
    import shutil
    import subprocess

    from verifier.front.binary import needed_libraries, scan_library

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.fail("no C++ compiler on this machine: the verifier's builds need one too")
    src = tmp_path / "softplus.cpp"
    src.write_text('#include <cmath>\nextern "C" void softplus(const float* x, float* y, long n) {\n'
                   "    for (long i = 0; i < n; ++i) y[i] = std::log1p(std::exp(x[i]));\n}\n")
    so = tmp_path / "softplus.so"
    subprocess.run([cxx, "-O3", "-ffast-math", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    assert any("libmvec" in lib for lib in needed_libraries(so)), needed_libraries(so)
    assert scan_library(so, [src.read_text()]) == []
