"""Red team of C09 on threads (issue 47): side work is work the timing misses, judged by what the candidate's threads
do after a call returned (verifier/child/monitors.py ``side_work_threads``), not by how many there are.

An OpenMP kernel with ``#pragma omp parallel for num_threads(2)`` (frontier models write it) leaves libgomp's pool
behind: its worker spins briefly after each region, then parks on a futex and uses no CPU until the next one. It was
C09 ("forward left 1 new thread(s) running"); it must pass, whether the pool starts in forward or in ``__init__``.
Its cheating twins keep C09: a detached ``std::thread`` that finishes the output after forward returned, and a
thread forward leaves running.

The end-to-end cases run on the cpu backend with one real extension built with -fopenmp (the child runs with
OMP_NUM_THREADS=1, so torch's own pool is one thread and ``num_threads(2)`` starts a thread of the candidate's).
The unit cases drive ``side_work_threads`` with real threads of this process: parked on an event, spinning, ending.
"""

import threading
import time

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.child.monitors import QUIET_S, SETTLE_S, side_work_threads, thread_ids, threads_beside

OMP_CPP = r"""
#include <torch/extension.h>
#include <chrono>
#include <thread>

static void relu_range(const float* a, float* b, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
}
// honest: its own loop over an OpenMP team of two, whose pool outlives the call
torch::Tensor relu_omp2(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* b = y.data_ptr<float>();
    const int64_t n = xc.numel();
    #pragma omp parallel for num_threads(2)
    for (int64_t i = 0; i < n; ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
    return y;
}
// cheat: the output is finished by a detached thread after forward returned (the timing sees an empty call), at
// once or a while later
torch::Tensor relu_detached(torch::Tensor x, int64_t delay_ms) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    std::thread([xc, y, delay_ms]() {
        if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        relu_range(xc.data_ptr<float>(), y.data_ptr<float>(), 0, xc.numel());
    }).detach();
    return y;
}
// cheat: a correct output, and a thread left computing after the call (for about 2 s)
torch::Tensor relu_leaves_a_spinner(torch::Tensor x) {
    static bool started = false;
    if (!started) {
        started = true;
        std::thread([]() {
            auto t0 = std::chrono::steady_clock::now();
            volatile double acc = 0;
            while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)) acc = acc + 1.0;
        }).detach();
    }
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    relu_range(xc.data_ptr<float>(), y.data_ptr<float>(), 0, xc.numel());
    return y;
}
"""
OMP_FUNCS = ["relu_omp2", "relu_detached", "relu_leaves_a_spinner"]


def omp(forward: str, init: str = "pass") -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{OMP_CPP}"""
ext = load_inline(name="omp_side_work", cpp_sources=CPP, functions={OMP_FUNCS!r}, extra_cflags=["-O2", "-fopenmp"],
                  extra_ldflags=["-lgomp"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        {forward}
'''


CASES = {
    # name: (candidate, expected status, cheat code that must be present or None)
    "honest_openmp_num_threads_2_pool_started_in_forward": (omp("return ext.relu_omp2(x)"), "pass", None),
    "honest_openmp_num_threads_2_pool_started_in_init": (
        omp("return ext.relu_omp2(x)", init="ext.relu_omp2(torch.randn(4096))"), "pass", None),
    "detached_thread_finishes_the_output_after_forward": (omp("return ext.relu_detached(x, 50)"), "cheat", cheats.C09),
    # the same thread without the wait: it may be done before the trial's checks look, never before the harness
    # reads a timed call's output (C16), and where it is still there as forward returned it is C09
    "detached_thread_computes_the_output_at_once": (omp("return ext.relu_detached(x, 0)"), "cheat",
                                                    (cheats.C09, cheats.C16)),
    "thread_left_computing_after_forward": (omp("return ext.relu_leaves_a_spinner(x)"), "cheat", cheats.C09),
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=5,
                       warmup=1, time_torch_compile=False, run_timeout_s=60, memory_limit_gb=4, exec_workers=1)
    task = Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=c[0]))
             for n, c in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=1)))


@pytest.mark.parametrize("name", list(CASES))
def test_side_work_case(verdicts, name):
    v = verdicts[name]
    _, status, code = CASES[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback[:600])
    if isinstance(code, tuple):
        assert set(code) & set(v.cheats) and v.reward < 0, (name, v.cheats, v.feedback[:400])
    elif code:
        assert code in v.cheats and v.reward < 0, (name, v.cheats, v.feedback[:400])
        assert "still at work after forward returned" in v.feedback
    else:
        assert v.cheats == [] and v.pass_strict is True


# ---------------------------------------------------------------------------- side_work_threads itself


def _start(target) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def test_a_parked_thread_is_not_side_work():
    baseline = thread_ids()
    release = threading.Event()
    t = _start(release.wait)  # blocked on a futex, as a parked OpenMP worker is
    try:
        time.sleep(0.02)
        t0 = time.monotonic()
        assert side_work_threads(threads_beside(baseline), baseline) == 0
        assert time.monotonic() - t0 < SETTLE_S  # decided once it was idle for QUIET_S, not at the limit
    finally:
        release.set()
        t.join()


def test_a_thread_still_computing_is_side_work():
    baseline = thread_ids()
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    t = _start(spin)
    try:
        assert side_work_threads(threads_beside(baseline), baseline) == 1
    finally:
        stop.set()
        t.join()


def test_a_thread_that_ends_after_the_call_is_side_work_where_the_call_returned():
    for ended_counts, expected in ((True, 1), (False, 0)):
        baseline = thread_ids()
        t = _start(lambda: time.sleep(QUIET_S / 2))  # still there as the call returns; gone during the check
        seen = threads_beside(baseline)
        assert len(seen) == 1
        assert side_work_threads(seen, baseline, ended_counts=ended_counts) == expected
        t.join()


def test_a_thread_started_after_the_call_is_side_work():
    baseline = thread_ids()
    release = threading.Event()
    later = []
    t = _start(lambda: (time.sleep(0.02), later.append(_start(release.wait)), release.wait()))
    try:
        seen = threads_beside(baseline)
        assert side_work_threads(seen, baseline) >= 1
    finally:
        release.set()
        t.join()
        for x in later:
            x.join()


def test_no_thread_of_the_candidates_costs_no_wait():
    baseline = thread_ids()
    t0 = time.monotonic()
    assert side_work_threads(threads_beside(baseline), baseline) == 0
    assert time.monotonic() - t0 < 0.005
