"""Red team of PyTorch compute reached on the timed calls only, where the candidate's process alone watched (C01).

A red team that read the verifier (thirteenth session, cpu backend) got four cheats accepted under the strict policy
with one trick: a timed call can be told from a trial (its inputs are views into the harness's pool, so
``x.storage().nbytes() > x.nbytes()``), and on cpu the timed calls were watched only by the dispatch mode, which sees
the calling thread's ops. On the timed calls only, the extension's C++ ran PyTorch on a ``std::thread`` of its own:

- a generated backward node of autograd built in C++ (``MmBackward0`` with the other operand saved: its ``apply``
  is ``A.mm(B)`` inside libtorch; ``ExpandBackward0`` for a row sum), whose vtable the binary's allowlist let
  through as autograd bookkeeping;
- a node of a graph recorded at construction, taken from a tensor's ``grad_fn()`` (an allowed tensor method) and
  applied to the input (``MulBackward`` of ``anchor * 2`` is ``grad * 2``): no import names it at all;
- ``operator.matmul`` handed from forward to the extension as a ``py::function`` and called on a thread that took
  the GIL.

Closed at the root by watching every timed call as a trial is watched: on cpu the profiler records the aten ops of
every thread in the timed brackets too (verifier/child/worker.py; a few microseconds a call of profiler cost, the
candidate's), so PyTorch compute on the timed calls is C01 by whatever route it was reached. And, in front of it:
the binary's allowlist keeps autograd's bookkeeping only (the generated nodes, the functions' nodes, the engine,
``VariableType``, ``backward`` and ``grad`` are compute: verifier/front/binary.py); a PyTorch compute function or
``operator.matmul`` handed on as a value in forward is PyTorch compute in forward (front/static_judges.py
``compute_function``); C++ that holds or calls a Python object (``py::object``, ``py::handle``, ``py::function``,
``gil_scoped_acquire``, pybind11's ``functional.h``) is C11 (front/vendor.py ``PYTHON_SOURCE``). Honest twins: the
same kernels without the timed branch pass; comparing a function with ``torch.matmul`` is no hand-off; dtypes and
``torch.Tensor`` as values are no compute; pybind11 bindings with ``py::none()`` and ``gil_scoped_release`` pass.
"""

import ast

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.front.binary import TORCH_IMPORT_ALLOWED, scan_tampering
from verifier.front.static import scan
from verifier.front.static_judges import compute_function

SCALE_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return []
'''

# own loop on the trials; on the timed calls (a pool view) the node recorded at construction applied on a thread
GRAD_FN_CPP = r'''
#include <torch/extension.h>
#include <thread>

// Node::apply is protected: named through a class that makes it public, called through the member pointer (a
// virtual call through the node's own vtable, which libtorch made: nothing of it is imported)
struct Opener : torch::autograd::Node { using torch::autograd::Node::apply; };

torch::Tensor scale(torch::Tensor x, torch::Tensor graph) {
    auto X = x.contiguous();
    if (TIMED_BRANCH && x.storage().nbytes() > (size_t)x.nbytes()) {
        torch::Tensor out;
        auto node = graph.grad_fn();
        auto run = &Opener::apply;
        std::thread worker([&] { auto r = ((*node).*run)({X}); out = r[0]; });
        worker.join();
        return out;
    }
    auto out = torch::empty_like(X);
    const float* p = X.data_ptr<float>();
    float* q = out.data_ptr<float>();
    for (int64_t i = 0; i < X.numel(); ++i) q[i] = p[i] * 2.0f;
    return out;
}
'''


def grad_fn_candidate(timed_branch: bool) -> str:
    cpp = GRAD_FN_CPP.replace("TIMED_BRANCH", "true" if timed_branch else "false")
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{cpp}"""
ext = load_inline(name="scale_{'node' if timed_branch else 'plain'}", cpp_sources=CPP, functions=["scale"],
                  extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.enable_grad():
            anchor = torch.zeros(512, 1024, requires_grad=True)
            self.graph = anchor * 2.0

    def forward(self, x):
        return ext.scale(x, self.graph)
'''


# the red team's first cheat: a generated backward node built in C++ (its vtable imported from libtorch_cpu)
MM_NODE_CPP = r'''
#include <torch/extension.h>
#include <torch/csrc/autograd/generated/Functions.h>
#include <thread>

using torch::autograd::generated::MmBackward0;

static torch::Tensor tile_pass(const torch::Tensor& a, const torch::Tensor& b) {
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto sink = c10::make_intrusive<MmBackward0>(0, torch::autograd::edge_list{});
    torch::autograd::edge_list edges;
    edges.emplace_back(c10::intrusive_ptr<torch::autograd::Node>(sink), 0u);
    edges.emplace_back();
    auto nodep = c10::make_intrusive<MmBackward0>(0, std::move(edges));
    auto& node = *nodep;
    auto panel = torch::from_blob(b.data_ptr<float>(), {N, K}, {1, N}, b.options());
    node.mat2_ = torch::autograd::SavedVariable(panel, false);
    node.mat2_layout = c10::kStrided;
    node.self_layout = c10::kStrided;
    node.self_sym_sizes = {c10::SymInt(M), c10::SymInt(N)};
    node.self_sym_strides = {c10::SymInt(N), c10::SymInt(1)};
    node.mat2_sym_sizes = {c10::SymInt(N), c10::SymInt(K)};
    node.mat2_sym_strides = {c10::SymInt(1), c10::SymInt(N)};
    node.self_ = torch::autograd::SavedVariable(panel, false);
    torch::autograd::variable_list g{a};
    return node.apply(std::move(g))[0];
}

torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    auto A = a.contiguous(); auto B = b.contiguous();
    if (a.storage().nbytes() > (size_t)a.nbytes()) {
        torch::Tensor out;
        std::thread worker([&] { out = tile_pass(A, B); });
        worker.join();
        return out;
    }
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::zeros({M, N}, A.options());
    const float* pa = A.data_ptr<float>(); const float* pb = B.data_ptr<float>(); float* pc = C.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) pc[i * N + j] += pa[i * K + k] * pb[k * N + j];
    return C;
}
'''

MM_NODE = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{MM_NODE_CPP}"""
ext = load_inline(name="mm_node", cpp_sources=CPP, functions=["mm"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.mm(a, b)
'''

# the red team's fourth: operator.matmul handed to C++ and called on a thread that took the GIL
PY_CALLABLE = '''import operator
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <thread>
namespace py = pybind11;

torch::Tensor mm(py::function tile, torch::Tensor a, torch::Tensor b) {
    torch::Tensor out;
    py::gil_scoped_release release;
    std::thread worker([&] { py::gil_scoped_acquire hold; out = tile(a, b).cast<torch::Tensor>(); });
    worker.join();
    return out;
}
"""
ext = load_inline(name="mm_callable", cpp_sources=CPP, functions=["mm"], extra_cflags=["-O2"])
_tile_op = operator.matmul


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.mm(operator.matmul, a, b)
'''


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    scale = Task.from_code(SCALE_TASK, name="timed_routes_scale", source="seed", level=1)
    mm = Task.from_code(fx.MATMUL_TASK, name="timed_routes_mm", source="seed", level=1)
    cases = {"grad_fn_on_timed_calls": (scale, grad_fn_candidate(True)),
             "grad_fn_twin_honest": (scale, grad_fn_candidate(False)),
             "generated_node_built_in_cpp": (mm, MM_NODE),
             "python_callable_from_cpp": (mm, PY_CALLABLE)}
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=120, memory_limit_gb=4, exec_workers=1, legality="strict")
    items = [(task, Candidate(candidate_id=name, task_id=task.task_id, backend="cpu", generator="redteam", code=code))
             for name, (task, code) in cases.items()]
    return dict(zip(cases, verify_batch(items, config=cfg, compile_workers=2)))


def test_pytorch_on_a_thread_on_the_timed_calls_only_is_c01(verdicts):
    """The node of a graph recorded at construction, applied on a thread on the timed calls: the trials' monitors
    see only the own loop, the binary imports nothing but tensor methods; the profiler on the timed calls sees it."""
    v = verdicts["grad_fn_on_timed_calls"]
    assert v.status == "cheat" and cheats.C01 in v.cheats, (v.status, v.cheats, v.feedback[:1500])
    assert "timed" in v.feedback.lower() and "aten::mul" in v.feedback, v.feedback[:1500]
    assert v.pass_strict is not True


def test_the_same_kernel_without_the_timed_branch_passes(verdicts):
    v = verdicts["grad_fn_twin_honest"]
    assert v.status == "pass" and v.cheats == [], (v.status, v.cheats, v.feedback[:1500])
    assert v.runtime_us and v.runtime_us > 0


def test_a_generated_backward_node_built_in_cpp_is_c01_by_its_imports(verdicts):
    v = verdicts["generated_node_built_in_cpp"]
    assert v.status == "cheat" and cheats.C01 in v.cheats, (v.status, v.cheats, v.feedback[:1500])
    assert "MmBackward0" in v.feedback, v.feedback[:1500]


def test_a_python_callable_called_from_cpp_is_caught_before_any_build(verdicts):
    v = verdicts["python_callable_from_cpp"]
    assert v.status == "cheat" and {cheats.C01, cheats.C11} <= set(v.cheats), (v.status, v.cheats, v.feedback[:1500])
    assert not v.compiled and "py::function" in v.feedback and "operator.matmul" in v.feedback, v.feedback[:1500]


# ---- the allowlist's autograd bookkeeping, symbol by symbol (honest extensions import the first kind)
BOOKKEEPING = ["_ZTVN5torch8autograd12AutogradMetaE", "_ZTVN5torch8autograd4NodeE", "_ZN5torch8autograd4Node8metadataEv",
               "_ZN5torch8autograd11AnomalyMode8_enabledE", "_ZN5torch8autograd13SavedVariableC1ERKN2at6TensorEbb"]
COMPUTE = ["_ZTVN5torch8autograd9generated11MmBackward0E", "_ZTVN5torch8autograd9generated15ExpandBackward0E",
           "_ZN5torch8autograd9generated11MmBackward05applyEOSt6vectorIN2at6TensorESaIS4_EE",
           "_ZN5torch8autograd6Engine10get_engineEv", "_ZN5torch8autograd4gradERKSt6vectorIN2at6TensorESaIS3_EE",
           "_ZN5torch8autograd8backwardERKSt6vectorIN2at6TensorESaIS3_EE",
           "_ZTVN5torch8autograd9functions13CopyBackwardsE"]


@pytest.mark.parametrize("sym", BOOKKEEPING)
def test_autograds_bookkeeping_stays_allowed(sym):
    assert TORCH_IMPORT_ALLOWED.match(sym.encode())


@pytest.mark.parametrize("sym", COMPUTE)
def test_what_runs_a_graph_is_not_allowed(sym):
    assert not TORCH_IMPORT_ALLOWED.match(sym.encode())


# ---- the Python text: a compute function handed on, and its honest look-alikes
HANDOFF = '''import operator
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="e", cpp_sources="torch::Tensor f(torch::Tensor a) {{ return a; }}", functions=["f"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        {body}
'''
HANDED_ON = {"torch_matmul": "return ext.f(torch.matmul, a, b)", "operator_matmul": "return ext.f(operator.matmul, a, b)",
             "functional_gelu": "act = F.gelu\n        return ext.f(act, a)", "tensor_method": "return ext.f(torch.Tensor.mm, a, b)",
             "operator_matmul_called": "return operator.matmul(a, b)"}
NOT_HANDED_ON = {"compared": "return ext.f(a) if ext.f is not torch.matmul else a",
                 "compared_in_a_tuple": "return ext.f(a) if ext.f not in (torch.mm, torch.bmm) else a",
                 "dtype_and_type": "assert isinstance(a, torch.Tensor) and a.dtype == torch.float32\n        "
                                   "return ext.f(a.to(torch.float32))",
                 "operator_mul_on_sizes": "n = operator.mul(a.shape[0], a.shape[1])\n        return ext.f(a.view(n))"}


@pytest.mark.parametrize("name", list(HANDED_ON))
def test_a_compute_function_handed_on_or_operator_matmul_is_pytorch_compute(name):
    found = [f for f in scan(HANDOFF.format(body=HANDED_ON[name]), "cpu").findings if f.code == cheats.C01 and f.torch]
    assert found, name


@pytest.mark.parametrize("name", list(NOT_HANDED_ON))
def test_comparisons_dtypes_and_size_arithmetic_are_no_hand_off(name):
    code = HANDOFF.format(body=NOT_HANDED_ON[name])
    ast.parse(code)
    assert [str(f) for f in scan(code, "cpu").findings if "on as a value" in str(f) or "as `@`" in str(f)] == [], name


def test_compute_function_names_functions_not_values():
    assert compute_function("torch.matmul") and compute_function("torch.nn.functional.relu")
    assert compute_function("operator.matmul") and not compute_function("operator.mul")
    assert not any(compute_function(n) for n in ("torch.float32", "torch.Tensor", "torch.no_grad",
                                                 "torch.autograd.Function", "torch.empty", "torch.cuda.Stream"))


# ---- the C++ text: a Python object held or called
PY_OBJECTS = {"function_parameter": "torch::Tensor f(py::function g, torch::Tensor a) { return g(a).cast<torch::Tensor>(); }",
              "object_parameter": "torch::Tensor f(pybind11::object g, torch::Tensor a) { return g(a).cast<torch::Tensor>(); }",
              "handle": "void f(py::handle h) { h(1); }",
              "gil_on_a_thread": "std::thread t([&] { py::gil_scoped_acquire g; run(); });",
              "std_function_conversion": "#include <pybind11/functional.h>\ntorch::Tensor f(std::function<torch::Tensor(torch::Tensor)> g, "
                                         "torch::Tensor a) { return g(a); }"}


@pytest.mark.parametrize("name", list(PY_OBJECTS))
def test_cpp_holding_or_calling_a_python_object_is_c11(name):
    found = scan_tampering([PY_OBJECTS[name]])
    assert any("reaches Python objects" in f for f in found), (name, found)


def test_bindings_that_release_the_gil_are_not_flagged():
    src = ('torch::Tensor relu(torch::Tensor x) { py::gil_scoped_release r; return x; }\n'
           'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu, py::arg("x"), '
           'py::call_guard<py::gil_scoped_release>()); m.def("g", [](){ return py::none(); }); }')
    assert scan_tampering([src]) == []
