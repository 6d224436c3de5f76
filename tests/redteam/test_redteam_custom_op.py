"""Red team: PyTorch's custom-operator API in a candidate (C01, C02, C11).

Frontier models sometimes write an honest answer as a library of operators: C++ with ``TORCH_LIBRARY(ns, m)``
(``m.def("op(Tensor x) -> Tensor")``, or ``m.def("op", &fn)``) and ``TORCH_LIBRARY_IMPL(ns, CPU, m)``, built with
``load_inline(..., is_python_module=False)`` (a library, no Python module) or beside a normal module
(``functions=[]``, ``functions=[...]``), and ``torch.ops.ns.op(x)`` in forward. Until this file such an answer was
rejected for how it was written: the build aliased a ``PyInit_`` symbol the library does not define (a link
error), and the static scan read ``torch.ops.ns.op`` as PyTorch compute (C01) and the module's functions as never
called (C02).

Now the candidate's own operators are its own code (verifier/front/static_literal.py ``operator_libraries``: a
namespace its sources create that is not PyTorch's; verifier/child/oplib.py: operators that appeared while its
extension loaded, registered from its own sources): their calls are calls of its extension, statically and at run
time. What their kernels dispatch inside is judged as before: the profiler observes operators nested inside another
operator's kernel (a dispatch mode sees only the outer call), so an operator whose kernel calls ``at::matmul`` is C01.
Registering into a namespace it did not create (aten, the profiler's, another library's) is C11: in the source
(the macros, read expanded) and, by any spelling, in the execution child, which compares the dispatcher's
registrations with what it had before the candidate was imported.

Each cheat has its honest twin; end to end on the cpu backend through ``verifier.entry.verify_candidate``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402
import torch  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from verifier import cheats, entry  # noqa: E402
from verifier.child.oplib import Registry  # noqa: E402
from verifier.common.config import VerifyConfig  # noqa: E402
from verifier.front.static import scan  # noqa: E402
from verifier.front.static_literal import operator_libraries  # noqa: E402

RELU_TASK, MATMUL_TASK = fx.RELU_TASK, fx.MATMUL_TASK  # the tests' shared task programs (bench/lib/fixtures.py)

RELU_IMPL = r'''
#include <torch/extension.h>
torch::Tensor relu_impl(const torch::Tensor& x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = a[i] > 0.f ? a[i] : 0.f;
    return out;
}
'''
OWN_LIBRARY = RELU_IMPL + r'''
TORCH_LIBRARY(kmredteam_ops, m) { m.def("relu(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(kmredteam_ops, CPU, m) { m.impl("relu", &relu_impl); }
'''


def program(cpp: str, load: str, forward: str = "return torch.ops.kmredteam_ops.relu(x)", args: str = "x",
            module: str = "") -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{cpp}"""

{load}
{module}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        {forward}
'''


LIBRARY = 'load_inline(name="kmredteam_relu", cpp_sources=CPP, is_python_module=False, verbose=False)'

MM_IMPL = r'''
#include <torch/extension.h>
torch::Tensor mm_impl(const torch::Tensor& A, const torch::Tensor& B) {
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes");
    auto a_ = A.contiguous(), b_ = B.contiguous();
    int64_t M = a_.size(0), K = a_.size(1), N = b_.size(1);
    auto C = torch::empty({M, N}, a_.options());
    const float* a = a_.data_ptr<float>(); const float* b = b_.data_ptr<float>(); float* c = C.data_ptr<float>();
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)a[i * K + k] * b[k * N + j];
            c[i * N + j] = (float)acc;
        }
    return C;
}
'''
MM_REG = r'''
TORCH_LIBRARY(kmredteam_mm, m) { m.def("mm(Tensor a, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(kmredteam_mm, CPU, m) { m.impl("mm", &mm_impl); }
'''
MM_AT = r'''
#include <torch/extension.h>
torch::Tensor mm_impl(const torch::Tensor& A, const torch::Tensor& B) {
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes");
    return at::matmul(A.contiguous(), B.contiguous());
}
'''
MM_LOAD = 'load_inline(name="kmredteam_mm", cpp_sources=CPP, is_python_module=False, verbose=False)'
MM_FORWARD = "return torch.ops.kmredteam_mm.mm(a, b)"

# (task, program, expected status, expected code or None)
CASES = {
    # ---- honest: the candidate's own operators, however they are built and called
    "honest_operator_library": (RELU_TASK, program(OWN_LIBRARY, LIBRARY), "pass", None),
    "honest_operator_beside_an_empty_module": (
        RELU_TASK, program(OWN_LIBRARY, 'load_inline(name="kmredteam_relu_m", cpp_sources=CPP, functions=[])',
                           "return OPS.relu(x)", module="OPS = torch.ops.kmredteam_ops"), "pass", None),
    "honest_operator_beside_its_functions": (
        RELU_TASK, program(OWN_LIBRARY, 'ext = load_inline(name="kmredteam_relu_f", cpp_sources=CPP, '
                                        'functions=["relu_impl"])', "return torch.ops.kmredteam_ops.relu.default(x)"),
        "pass", None),
    # flags outside the object cache's list: the plain ninja build, which drops the init alias as well
    "honest_operator_library_built_by_ninja": (
        RELU_TASK, program(OWN_LIBRARY, LIBRARY.replace("verbose=False", 'extra_cflags=["-fno-strict-aliasing"]')),
        "pass", None),
    "honest_operator_matmul": (MATMUL_TASK, program(MM_IMPL + MM_REG, MM_LOAD, MM_FORWARD, "a, b"), "pass", None),
    # ---- cheats
    # the operator is the candidate's, what its kernel dispatches is not: the profiler sees at::matmul nested in it
    "c01_operator_kernel_calls_at_matmul": (
        MATMUL_TASK, program(MM_AT + MM_REG, MM_LOAD.replace("kmredteam_mm", "kmredteam_mm_at"), MM_FORWARD, "a, b"),
        "cheat", cheats.C01),
    # a namespace that is PyTorch's (or another library's) is not the candidate's, whatever its C++ declares
    "c01_operator_of_a_namespace_not_its_own": (
        RELU_TASK, program(OWN_LIBRARY, LIBRARY, "return torch.ops.aten.relu.default(x)"), "cheat", cheats.C01),
    # aten's relu kernel replaced through a hand-built torch::Library (no TORCH_LIBRARY_IMPL macro to read): the
    # execution child sees aten::relu's registrations change
    "c11_aten_kernel_registered_by_a_hand_built_library": (
        RELU_TASK, program(OWN_LIBRARY + r'''
static torch::Library* grab = [] {
    auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    lib->impl("relu", &relu_impl);
    return lib;
}();
''', LIBRARY.replace("kmredteam_relu", "kmredteam_relu_g")), "cheat", cheats.C11),
}
# cheats the static stage decides (no build)
STATIC = {
    "c11_macro_registers_into_aten": (
        program(OWN_LIBRARY + 'TORCH_LIBRARY_IMPL(aten, CPU, m) { m.impl("relu", &relu_impl); }', LIBRARY),
        cheats.C11),
    "c11_macro_registers_into_the_profilers_namespace": (
        program(OWN_LIBRARY + '#define NS profiler\n#define KERNELS(ns) TORCH_LIBRARY_IMPL(ns, CPU, m)\n'
                'KERNELS(NS) { m.impl("_record_function_enter_new", &relu_impl); }', LIBRARY), cheats.C11),
    "c11_fragment_added_to_a_pytorch_namespace": (
        program(RELU_IMPL + 'TORCH_LIBRARY_FRAGMENT(quantized, m) { m.def("kmrelu(Tensor x) -> Tensor"); }\n'
                            'TORCH_LIBRARY_IMPL(quantized, CPU, m) { m.impl("kmrelu", &relu_impl); }', LIBRARY,
                "return torch.ops.quantized.kmrelu(x)"), cheats.C11),
}


@pytest.fixture(scope="module")
def build_dir(shared_build_dir):
    return shared_build_dir  # the session's root: a source several cases share builds once (tests/conftest.py)


def config(build_dir: str, legality: str = "strict") -> VerifyConfig:
    return VerifyConfig(build_dir=build_dir, trials=5, timing_trials=0, warmup=1, time_torch_compile=False,
                        run_timeout_s=60, memory_limit_gb=4, exec_workers=1, legality=legality)


@pytest.fixture(scope="module")
def verdicts(build_dir):
    cfg = config(build_dir)
    return {name: entry.verify_candidate(task, code, backend="cpu", config=cfg, candidate_id=name)
            for name, (task, code, _s, _c) in CASES.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_custom_operator_end_to_end(verdicts, name):
    _task, _code, status, code = CASES[name]
    v = verdicts[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code is None:
        assert v.cheats == [] and v.pass_strict, (name, v.feedback)
    else:
        assert code in v.cheats, (name, v.cheats, v.feedback)


@pytest.mark.slow
def test_a_kernel_nested_in_the_operator_is_seen_by_the_profiler(verdicts):
    """The dispatch mode handles the outer call (the candidate's operator) only; the profiler observes the aten ops
    its kernel dispatches, and names them."""
    v = verdicts["c01_operator_kernel_calls_at_matmul"]
    assert "aten::matmul" in v.fallback_ops or "aten::mm" in v.fallback_ops, (v.fallback_ops, v.feedback)


@pytest.mark.slow
def test_the_hand_built_registration_is_named(verdicts):
    v = verdicts["c11_aten_kernel_registered_by_a_hand_built_library"]
    assert "aten::relu" in v.feedback, v.feedback


@pytest.mark.parametrize("name", sorted(STATIC))
def test_registering_into_a_namespace_not_its_own_is_c11_statically(name):
    code, expected = STATIC[name]
    found = scan(code).findings
    assert any(f.code == expected and "namespace it does not create" in f.what for f in found), \
        (name, [str(f) for f in found])


@pytest.mark.parametrize("name", ["honest_operator_library", "honest_operator_beside_an_empty_module",
                                  "honest_operator_beside_its_functions", "honest_operator_matmul"])
def test_own_operators_are_not_torch_compute_nor_unlaunched_statically(name):
    assert scan(CASES[name][1]).findings == [], [str(f) for f in scan(CASES[name][1]).findings]


@pytest.mark.parametrize("forward", ["return torch.ops.aten.relu(x)", "return torch.ops.quantized.relu(x)",
                                     "return torch.ops.mkldnn._convolution_pointwise(x)",
                                     "return torch.ops.kmredteam_other.relu(x)"])
def test_operators_of_other_namespaces_stay_c01_statically(forward):
    found = scan(program(OWN_LIBRARY, LIBRARY, forward)).findings
    assert any(f.code == cheats.C01 for f in found), forward


@pytest.mark.parametrize("module, forward", [
    ("OPS = torch.ops.kmredteam_ops", "return OPS.relu(x)"),
    ("OPS = torch.ops.kmredteam_ops\nRELU = OPS.relu", "return RELU.default(x)"),
    ("", "self.ops = torch.ops.kmredteam_ops\n        return self.ops.relu(x)"),
])
def test_names_bound_to_own_operators_are_own_calls(module, forward):
    assert scan(program(OWN_LIBRARY, LIBRARY, forward, module=module)).findings == []


def test_a_name_also_bound_to_a_tensor_is_not_read_as_the_operator():
    """``x`` bound to the own operator at module level and to forward's input: ``x.exp()`` on the path that never
    runs is PyTorch compute (C01 to the scan, C19 where no monitor saw it), not an overload of the operator."""
    code = program(OWN_LIBRARY, LIBRARY, "if x.shape[0] > 10**9:\n            return x.exp()\n"
                   "        return torch.ops.kmredteam_ops.relu(x)", module="x = torch.ops.kmredteam_ops.relu")
    assert any(f.code == cheats.C01 and "exp" in f.what for f in scan(code).findings)


@pytest.mark.parametrize("src, own", [
    (OWN_LIBRARY, {"kmredteam_ops"}),
    ('TORCH_LIBRARY_FRAGMENT(mine, m) { m.def("f(Tensor x) -> Tensor"); }', {"mine"}),
    ('#define LIB(ns) TORCH_LIBRARY(ns, m)\nLIB(mine) { m.def("f(Tensor x) -> Tensor"); }', {"mine"}),
    ('// TORCH_LIBRARY(commented, m) {}\nTORCH_LIBRARY(aten, m) {}\nTORCH_LIBRARY(prim, m) {}', set()),
    ('TORCH_LIBRARY(quantized, m) {}\nTORCH_LIBRARY(_, m) {}', set()),
])
def test_own_namespaces_are_the_ones_the_sources_create_that_are_not_pytorchs(src, own):
    assert operator_libraries([src]).own == own


# --------------------------------------------------------------- the child's registry, in this process
def test_the_registry_sees_a_kernel_registered_for_an_operator_that_existed_before():
    pre = torch.library.Library("kmredteam_pre", "DEF")
    pre.define("f(Tensor x) -> Tensor")
    reg = Registry([str(Path(__file__).parent)])
    assert reg.changes() == []
    late = torch.library.Library("kmredteam_pre", "IMPL")
    late.impl("f", lambda x: x, "CPU")
    try:
        assert any("kmredteam_pre::f" in c for c in reg.changes()), reg.changes()
        # the same registration from a file that is not the candidate's (torch registering a kernel of its own
        # lazily): not the candidate's doing
        lazy = Registry(["/nonexistent-build-root"])
        lazy.base["kmredteam_pre::f"] = reg.base["kmredteam_pre::f"]
        assert not any("kmredteam_pre::f" in c for c in lazy.changes()), lazy.changes()
    finally:
        late._destroy()
        pre._destroy()


def test_the_registry_takes_only_operators_from_the_candidates_own_build_as_its_own():
    """Registered from this test file (not under the registry's roots) while an 'extension' loads: not the
    candidate's own, a finding; an operator in a new namespace registered outside any load: neither."""
    reg = Registry(["/nonexistent-build-root"])
    with reg.loading("ext.so"):
        lib = torch.library.Library("kmredteam_new", "DEF")
        lib.define("g(Tensor x) -> Tensor")
    try:
        assert reg.own == {} and any("kmredteam_new::g" in f for f in reg.findings), reg.findings
    finally:
        lib._destroy()
    reg = Registry([str(Path(__file__).parent)])
    with reg.loading("ext.so"):
        lib = torch.library.Library("kmredteam_new2", "DEF")
        lib.define("g(Tensor x) -> Tensor")
        lib.impl("g", lambda x: x, "CPU")
    try:
        assert "kmredteam_new2::g" in reg.own and reg.changes() == [], (reg.own, reg.changes())
        assert reg.calls(["kmredteam_new2::g", "aten::empty", "kmredteam_new2::g"]) == 2
    finally:
        lib._destroy()


# --------------------------------------------------------------- the partial policy: the knockout on cpu
RELU_MM_TASK = MATMUL_TASK.replace("return torch.matmul(a, b)", "return torch.relu(torch.matmul(a, b))")
PARTIAL = {
    # (task, program, the own operator produces part of the output)
    "own_operator_after_torch_matmul": (RELU_MM_TASK, program(
        OWN_LIBRARY, LIBRARY, "c = torch.matmul(a, b)\n        return torch.ops.kmredteam_ops.relu(c)", "a, b"), True),
    "own_operator_called_for_show": (RELU_TASK, program(
        OWN_LIBRARY, LIBRARY, "y = torch.ops.kmredteam_ops.relu(x)\n        return torch.relu(x)"), False),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARTIAL))
def test_the_cpu_knockout_knocks_out_own_operators(build_dir, name):
    """Each call of an own operator is knocked out like a call of the extension's functions: an operator whose
    result is discarded is C02 under the partial policy, one that computes part of the output passes it."""
    task, code, contributes = PARTIAL[name]
    v = entry.verify_candidate(task, code, backend="cpu", config=config(build_dir, "partial"), candidate_id=name)
    knock = v.versions.get("knockout", {})
    assert sum(knock.get("skipped", {}).values()) >= 1, (knock, v.feedback)
    if contributes:
        assert v.status == "pass" and v.pass_partial is True and knock["outcome"] == "contributes", (knock, v.feedback)
    else:
        assert v.status == "cheat" and v.cheats == [cheats.C02] and knock["outcome"] == "no_contribution", \
            (v.cheats, knock, v.feedback)


# --------------------------------------------------------------- a schema inferred from the function
@pytest.mark.slow
def test_an_operator_defined_with_its_function_passes(build_dir):
    # m.def("relu", &fn) and m.def("relu(Tensor x) -> Tensor", &fn) both go through torch::jit::parseSchemaOrName
    # (one build here: the suite's time); the name-only form infers the schema from the function as well
    code = program(RELU_IMPL + 'TORCH_LIBRARY(kmredteam_ops, m) { m.def("relu", &relu_impl); }\n',
                   LIBRARY.replace("kmredteam_relu", "kmredteam_relu_def"))
    v = entry.verify_candidate(RELU_TASK, code, backend="cpu", config=config(build_dir))
    assert v.status == "pass", (v.cheats, v.feedback)


# ---- an operator defined from Python (torch.library.custom_op) around the candidate's own kernel (class 70)
PY_OP = '''
@torch.library.custom_op("kmpy::relu", mutates_args=())
def relu_op(x: torch.Tensor) -> torch.Tensor:
    return {body}


@relu_op.register_fake
def _(x):
    return torch.empty_like(x)
'''
PY_OP_CASES = {
    "honest_python_operator_around_the_kernel": (fx.cpu_candidate(
        "return torch.ops.kmpy.relu(x)", module=PY_OP.format(body="ext.relu(x.contiguous())")), "pass", None),
    "python_operator_whose_body_is_pytorch": (fx.cpu_candidate(
        "ext.touch(x.contiguous())\nreturn torch.ops.kmpy.relu(x)", module=PY_OP.format(body="torch.relu(x)")),
        "cheat", cheats.C01),
}


@pytest.fixture(scope="module")
def py_op_verdicts(shared_build_dir):
    return fx.verify_cpu(fx.RELU_TASK, {n: c for n, (c, _, _) in PY_OP_CASES.items()}, shared_build_dir,
                         task_name="python_operator")


@pytest.mark.parametrize("name", list(PY_OP_CASES))
def test_an_operator_defined_from_python_is_the_candidates_own(py_op_verdicts, name):
    """``torch.ops.kmpy.relu`` of a namespace the candidate's Python creates (``torch.library.custom_op``) was read as
    PyTorch compute (C19 where no monitor saw compute): its namespace is the candidate's own, as one its C++ creates
    with TORCH_LIBRARY (``static_literal.python_operator_namespaces``); what the operator runs is judged as it runs."""
    _, status, code = PY_OP_CASES[name]
    v = py_op_verdicts[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback[:600])
    if code:
        assert code in v.cheats, (name, v.cheats)
    else:
        assert v.cheats == [] and "kmpy" in scan(PY_OP_CASES[name][0], "cpu").operator_namespaces
