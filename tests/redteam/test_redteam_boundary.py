"""Red team of the trust boundary (issue 34; docs/ANTI_CHEAT.md: C11, C12, classes 19, 20, 22, 23): candidates
written by reading the verifier's code, each trying to cross from the candidate's process into what the verdict
relies on, on the cpu backend with a real compiled extension (one build shared by every case). Each is named for
what it does; each must be rejected with its code, and the honest look-alikes must pass.

Cases that use Python reflection the static scan already flags are judged here with the static findings
dropped (as tests/test_verifier_run.py does for its runtime layer), so the runtime boundary alone decides."""

from unittest import mock

import pytest
import torch

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task, Verdict
from verifier import cheats, entry, screen
from verifier.engine import VerifyConfig, verify_batch
from verifier.child.channel import Channel
from verifier.execute.channel import Driver

RED_CPP = r"""
#include <torch/extension.h>
#include <thread>
#include <chrono>
namespace py = pybind11;

torch::Tensor relu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
    return y;
}

// the timer of the timing backend, replaced through pybind11: no Python line to scan
void patch_timer() {
    py::object cls = py::module_::import("verifier.common.backends").attr("CpuBackend");
    cls.attr("elapsed_us") = py::module_::import("builtins").attr("eval")("lambda self, a, b: (b - a) * 1e6 / 16");
}

// every seed-like value in the callers' frames: locals named seed/seeds, and trial/timing seeds of a job
py::list frame_seeds() {
    py::list found;
    py::object f = py::module_::import("sys").attr("_getframe")(0);
    while (!f.is_none()) {
        py::dict loc = f.attr("f_locals");
        for (auto item : loc) {
            py::object v = py::reinterpret_borrow<py::object>(item.second);
            std::string key = py::str(item.first);
            for (const char* name : {"trial_seeds", "timing_seeds"}) {
                try { for (auto s : v.attr(name)) found.append(s); } catch (py::error_already_set&) {}
            }
            if (key == "seed" || key == "seeds") found.append(v);
        }
        f = f.attr("f_back");
    }
    return found;
}

// the verifier's channel object, found in a caller's frame, asked for trial 0's seed ahead of the verifier
int64_t ask_channel() {
    py::object f = py::module_::import("sys").attr("_getframe")(0);
    while (!f.is_none()) {
        py::dict loc = f.attr("f_locals");
        for (auto item : loc) {
            py::object v = py::reinterpret_borrow<py::object>(item.second);
            if (py::hasattr(v, "trial_seed")) return v.attr("trial_seed")(0).cast<int64_t>();
        }
        f = f.attr("f_back");
    }
    return -1;
}

// honest and slow: the same ReLU recomputed for about 1.5 s a call (a direct ConvTranspose3d took 1.4 s)
torch::Tensor slow_relu(torch::Tensor x) {
    auto t0 = std::chrono::steady_clock::now();
    torch::Tensor y;
    do { y = ::relu(x); } while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500));
    return y;
}

// work on a thread of its own, started at import: no thread-local monitor sees it
void start_thread() {
    std::thread([] { while (true) std::this_thread::sleep_for(std::chrono::milliseconds(20)); }).detach();
}
// ATen compute on a std::thread started and joined inside the call: nothing outlives it, and neither the
// dispatch mode nor a profiler that watches the calling thread only sees the op
torch::Tensor relu_on_a_thread(torch::Tensor x) {
    torch::Tensor y;
    std::thread t([&] { y = at::clamp_min(x, 0.0); });
    t.join();
    return y;
}
// honest: its own loop split over two std::threads, no ATen compute on either
torch::Tensor relu_two_threads(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* b = y.data_ptr<float>();
    const int64_t n = xc.numel(), h = n / 2;
    auto part = [&](int64_t lo, int64_t hi) { for (int64_t i = lo; i < hi; ++i) b[i] = a[i] > 0.f ? a[i] : 0.f; };
    std::thread t(part, int64_t(0), h);
    part(h, n);
    t.join();
    return y;
}
// honest: its own loop over an OpenMP team (a pool the first call may start, and that stays)
torch::Tensor relu_openmp(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* b = y.data_ptr<float>();
    const int64_t n = xc.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
    return y;
}
"""
RED_FUNCS = ["relu", "slow_relu", "patch_timer", "frame_seeds", "ask_channel", "start_thread", "relu_on_a_thread",
             "relu_two_threads", "relu_openmp"]


# the honest look-alikes' extension: the same C++ without the functions that reach Python modules from C++ (the
# built module's imports show those: PyImport_ImportModule, C11 by the binary scan), and without the ATen call on a
# thread of its own (an extension that starts threads and imports ATen compute is PyTorch compute in forward by the
# binary scan: C19 where no monitor saw it run); that cheat has an extension of its own (the honest one plus it)
_PY_FUNCS = ("patch_timer", "frame_seeds", "ask_channel")
_ATEN_ON_A_THREAD = RED_CPP[RED_CPP.index("// ATen compute on a std::thread"):RED_CPP.index("// honest: its own loop split")]
HONEST_CPP = (RED_CPP[:RED_CPP.index("// the timer of the timing backend")] +
              RED_CPP[RED_CPP.index("// honest and slow"):]).replace(_ATEN_ON_A_THREAD, "")
HONEST_FUNCS = [f for f in RED_FUNCS if f not in _PY_FUNCS and f != "relu_on_a_thread"]
THREAD_CPP, THREAD_FUNCS = HONEST_CPP + _ATEN_ON_A_THREAD, HONEST_FUNCS + ["relu_on_a_thread"]


def red(forward: str, *, module: str = "", init: str = "pass", imports: str = "", cpp: str = "") -> str:
    reaches_python = any(f in forward + module + init for f in _PY_FUNCS) if not cpp else cpp == "red"
    src, funcs, name = (RED_CPP, RED_FUNCS, "red_ext") if reaches_python else (HONEST_CPP, HONEST_FUNCS, "red_plain")
    if "relu_on_a_thread" in forward and not reaches_python:
        src, funcs, name = THREAD_CPP, THREAD_FUNCS, "red_thread"
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{imports}
CPP = r"""{src}"""
ext = load_inline(name="{name}", cpp_sources=CPP, functions={funcs!r}, extra_cflags=["-O2", "-fopenmp"],
                  extra_ldflags=["-lgomp"])
{module}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        {forward}
'''


# precompute answers from stolen seeds the way the verifier draws inputs (torch.manual_seed, get_inputs)
STEAL = ("self.answers = []\n        for s in ext.frame_seeds():\n            if isinstance(s, int):\n"
         "                torch.manual_seed(s)\n                self.answers.append(ext.relu(torch.randn(64, 1000)))")
CASES = {
    # name: (candidate, expected status, cheat code that must be present or None, static findings dropped)
    "timer_patched_from_cpp_through_a_class_attribute": (red("return ext.relu(x)", module="ext.patch_timer()"),
                                                         "cheat", cheats.C11, False),
    "timer_patched_by_replacing_the_method_code_object": (red("return ext.relu(x)", module=(
        "import sys\nsys.modules['verifier.common.backends'].CpuBackend.elapsed_us.__code__ = "
        "(lambda self, a, b: (b - a) * 1e5).__code__")), "cheat", cheats.C11, True),
    "timing_backend_instance_method_shadowed_from_a_frame": (red(
        "for f in [sys._getframe(k) for k in range(1, 6)]:\n"
        "            b = f.f_locals.get('backend')\n"
        "            if b is not None:\n"
        "                b.elapsed_us = lambda a, c: 0.01\n"
        "        return ext.relu(x)", imports="import sys"), "cheat", cheats.C11, True),
    "report_writer_replaced_to_launder_the_report": (red("return ext.relu(x)", module=(
        "import sys\nsys.modules['verifier.common.contract'].ChildReport.write = lambda self, d: None")),
        "cheat", cheats.C11, True),
    # C++ that imports Python modules (pybind11's py::module_::import: PyImport_ImportModule in the built module's
    # imports) is C11 by the binary scan before it runs; with no seed in any frame it would still steal nothing
    # (a wrong verdict), and the channel refuses a step out of turn (C12: test_the_child_never_sees_a_seed...)
    "seeds_read_from_callers_frames_in_cpp_at_construction": (red(
        "if self.answers:\n            return ext.relu(self.answers.pop(0))\n"
        "        return ext.relu(x.t().contiguous().view(x.shape))",
        init=STEAL), "cheat", cheats.C11, True),
    "channel_asked_for_a_seed_ahead_of_the_verifier": (red("return ext.relu(x)", init="self.stolen = ext.ask_channel()"),
                                                       "cheat", cheats.C11, False),
    "thread_started_at_import_outlives_it": (red("return ext.relu(x)", module="ext.start_thread()"),
                                             "cheat", cheats.C09, False),
    # docs/ANTI_CHEAT.md class 22 inside the call: PyTorch compute on a thread started and joined within forward,
    # from C++ (the static scan has nothing to read) and from Python (its findings dropped)
    "aten_on_a_cpp_thread_inside_forward": (red("return ext.relu_on_a_thread(x)"), "cheat", cheats.C01, False),
    "torch_on_a_python_thread_inside_forward": (red(
        "out = {}\n        t = threading.Thread(target=lambda: out.update(y=torch.relu(x)))\n"
        "        t.start()\n        t.join()\n        ext.relu(x)\n        return out['y']", imports="import threading"),
        "cheat", cheats.C01, True),
    # honest look-alikes
    "honest_own_loop_split_over_two_cpp_threads": (red("return ext.relu_two_threads(x)"), "pass", None, False),
    "honest_own_loop_on_an_openmp_team": (red("return ext.relu_openmp(x)"), "pass", None, False),
    "honest_relu_same_extension": (red("return ext.relu(x)"), "pass", None, False),
    "honest_reads_its_own_training_flag": (red("assert self.training, 'KernelBench runs modules as constructed'\n"
                                               "        return ext.relu(x)"), "pass", None, False),
    # an OpenMP pool torch creates lazily inside forward (a large zeros fill) is torch's, not the candidate's thread
    "honest_lazy_openmp_pool_in_forward": (red("buf = torch.zeros(1 << 22)\n        return ext.relu(x)"),
                                           "pass", None, False),
}


@pytest.fixture(scope="module")
def build_dir(shared_build_dir):
    return shared_build_dir  # the session's root: its fork servers and objects are kept (tests/conftest.py)


@pytest.fixture(scope="module")
def verdicts(build_dir):
    cfg = VerifyConfig(build_dir=build_dir, trials=5, timing_trials=5, warmup=1,
                       time_torch_compile=False, run_timeout_s=40, memory_limit_gb=4, exec_workers=2)
    task = Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)
    names = list(CASES)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam",
                              code=CASES[n][0])) for n in names]
    dropped = {CASES[n][0] for n in names if CASES[n][3]}
    real_scan = screen.scan

    def scan(code, backend="cpu"):
        report = real_scan(code, backend)
        if code in dropped:
            report.findings = []
        return report

    with mock.patch.object(screen, "scan", scan):
        return dict(zip(names, verify_batch(items, config=cfg, compile_workers=2)))


@pytest.mark.parametrize("name", list(CASES))
def test_redteam_case(verdicts, name):
    v = verdicts[name]
    _, status, code, _ = CASES[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback[:600])
    if code:
        assert code in v.cheats, (name, v.cheats, v.feedback[:400])
        assert v.reward < 0


def test_a_slow_correct_kernel_is_timed_not_killed(build_dir):
    """1.5 s a call under the default 20 timed iterations and 10 probe pairs used to run past the job's limit and
    come back as a timeout about loops that never end; the timed iterations and probes are fitted to the call
    time (verify.timing_budget_s), so it is a pass with its (slow) time."""
    cfg = VerifyConfig(build_dir=build_dir, trials=5, timing_trials=20, gap_probes=10, warmup=1, timing_budget_s=3,
                       time_torch_compile=False, run_timeout_s=45, memory_limit_gb=4)
    v = entry.verify_candidate(fx.RELU_TASK, red("return ext.slow_relu(x)"), backend="cpu", config=cfg)
    assert v.status == "pass", (v.status, v.feedback[:500])
    assert v.runtime_us > 1e6 and v.speedup_eager < 1


def test_the_child_never_sees_a_seed_before_its_trial(tmp_path):
    """The verifier's side of the channel: no seed exists before it is asked for in turn; the next trial's
    only after the previous one; timing seeds only after the trials; anything out of turn refused and recorded."""
    given = []
    d = Driver(tmp_path, n_trials=2, n_timing=3, on_trial=lambda i, s: given.append((i, s)))
    ch = Channel(tmp_path)
    try:
        assert d.ledger.trial_seeds == {}
        with pytest.raises(ConnectionRefusedError):
            ch.timing_seeds()  # trials not over
        with pytest.raises(ConnectionRefusedError):
            ch.trial_seed(1)  # trial 0 first
        s0 = ch.trial_seed(0)
        with pytest.raises(ConnectionRefusedError):
            ch.trial_seed(0)  # taken once
        s1 = ch.trial_seed(1)
        timing = ch.timing_seeds()
    finally:
        ch.close()
        ledger = d.close()
    assert [i for i, _ in given] == [0, 1] and ledger.trial_seeds == {0: s0, 1: s1}
    assert len(timing) == 3 and ledger.timing_seeds == timing
    assert len(ledger.problems) == 3


def test_candidate_kernels_are_built_under_names_only_their_module_carries():
    """A kernel named like PyTorch's (softmax_warp_forward) is compiled as kmown_softmax_warp_forward, so
    PyTorch's own kernel of that name is never booked as the candidate's; every mention is renamed alike (a
    launch, a function pointer for cudaLaunchKernel, a lookup by name), while a name another file links to
    keeps its spelling and then counts as the candidate's only where no foreign family matches it."""
    from verifier.common.backends import is_own_kernel, own_kernel_names, own_kernel_renames, rename_kernels
    from verifier.common.spec import compat_spec

    src = ('__global__ void softmax_warp_forward(float* y) {}\n'
           'template <int B> __global__ void gemm_tile(float* c) {}\n'
           'void run(float* y) { softmax_warp_forward<<<1, 1>>>(y); gemm_tile<64><<<1, 1>>>(y);\n'
           '  cudaLaunchKernel((const void*)softmax_warp_forward, 1, 1, nullptr, 0, 0);\n'
           '  const char* k = "gemm_tile"; }\n')
    spec = {"cuda_sources": [src], "cpp_sources": ["void run(float* y);"], "functions": ["run"]}
    built = compat_spec(spec)[0]["cuda_sources"][0]
    assert "softmax_warp_forward" not in built.replace("kmown_softmax_warp_forward", "")
    assert built.count("kmown_softmax_warp_forward") == 3 and '"kmown_gemm_tile"' in built
    assert built.count("\n") == src.count("\n")
    names = own_kernel_names(spec)
    pytorch = ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, "
               "float const*, int, int, int, bool const*, int, bool)")
    assert not is_own_kernel(pytorch, names)
    assert is_own_kernel("kmown_softmax_warp_forward(float*)", names)
    assert is_own_kernel("void kmown_gemm_tile<64>(float*)", names)  # a vendor-looking name of its own
    # named in the C++ file too: kept as written, and then never given a foreign family's time
    linked = dict(spec, cpp_sources=["void softmax_warp_forward(float*);"])
    assert "softmax_warp_forward" not in own_kernel_renames(linked)
    assert not is_own_kernel(pytorch, own_kernel_names(linked))
    assert rename_kernels("x", {}) == "x"


def test_a_name_of_the_task_program_used_by_the_candidate_is_named_in_the_feedback(build_dir):
    """KernelBench runs a solution in the task's globals; this verifier runs it as its own module. A solution that
    uses the task's batch_size crashes, and the feedback names the name and says where it lives."""
    task = fx.RELU_TASK.replace("def get_inputs():", "batch_size = 64\n\n\ndef get_inputs():")
    cfg = VerifyConfig(build_dir=build_dir, trials=5, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=40, memory_limit_gb=4)
    v = entry.verify_candidate(task, red("return ext.relu(x[:batch_size])"), backend="cpu", config=cfg)
    assert v.status == "crash" and "`batch_size` is defined in the task program" in v.feedback, v.feedback[:600]


def test_the_precompiled_header_of_another_environment_is_not_reused(monkeypatch):
    """Two environments with the same torch version (a second venv) get different precompiled headers: the key
    holds torch's include directory and the interpreter's prefix."""
    import torch

    from verifier.build import pch

    a = pch.pch_key({"extra_cflags": ["-O2"]})
    monkeypatch.setattr(torch, "__file__", "/elsewhere/venv/lib/python3.11/site-packages/torch/__init__.py")
    assert pch.pch_key({"extra_cflags": ["-O2"]}) != a
    monkeypatch.undo()
    assert pch.pch_key({"extra_cflags": ["-O2"]}) == a
