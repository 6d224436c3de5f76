"""Red team: PyTorch's own compute reached from a candidate's C++ by a route no runtime monitor sees, and the
reference's answers kept by an observer of every op (C01, C11, C14/C15).

A red team that read the verifier got these accepted on the cpu backend:
- PyTorch's libraries export more than ATen: Fortran BLAS (``SGEMM``, ``sgemm``), MKL's vector math (``vsExp``),
  fbgemm, NNPACK. Called by a name the vendor denylist did not spell (or bound to a harmless name by an asm label),
  they compute below the dispatcher. Closed at the root: what an extension takes from libtorch_cpu / libtorch_cuda
  must be on an allowlist (verifier/front/binary.py ``TORCH_IMPORT_ALLOWED``), whatever its name;
- the dispatcher's handles got without a lookup by name (a registration listener) and called with a key set below
  the monitors: the listener and the dispatcher's own entry points are not on the allowlist, and registering a
  listener is tampering (C11);
- Python objects walked from C++ (``.attr("__globals__")``, the builtins' ``__import__``, a type's ``tp_getattro``) to
  reach ``torch.ops.aten.<op>.default.redispatch``: C11 in the source, read as written and with the candidate's own
  macros expanded (a name pasted with ``##``); pybind11 imports the C API for itself, so the binary says nothing;
- a global RecordFunction observer keeping the reference's output of the extra-shape trial: registering the
  observer is C11, and the reference now runs after the candidate on that trial (verifier/child/worker.py).

Honest twins pass: ``at::parallel_for``, ``AT_DISPATCH``, data pointers, ``torch::empty``, SLEEF's vector math.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402
import torch  # noqa: E402,F401 - PyTorch's libraries loaded here: the scan resolves imports against them

from bench.lib import fixtures as fx  # noqa: E402
from verifier.front.binary import scan_library, scan_tampering, torch_imports  # noqa: E402

# (name, C++ declaring and calling one symbol by its exported name), each built into a tiny shared object
TAKEN = {
    "fortran_blas_upper": 'extern "C" void SGEMM(); void f() { SGEMM(); }',
    "fortran_blas_lower": 'extern "C" void sgemm(); void f() { sgemm(); }',
    "mkl_vector_math": 'extern "C" void vsExp(); void f() { vsExp(); }',
    "fbgemm_under_an_asm_label": 'void harmless() asm("_ZN6fbgemm15cblas_sgemm_refENS_11matrix_op_tES0_iiifPKfiS2_'
                                 'ifPfi"); void f() { harmless(); }',
    "nnpack": 'extern "C" void nnp_convolution_output(); void f() { nnp_convolution_output(); }',
    "dispatcher_singleton": 'void d() asm("_ZN3c1010Dispatcher13realSingletonEv"); void f() { d(); }',
    # ATen's own kernels under names that hold an allowed class's name: an allowlist entry must match a name
    # exactly, not any name it appears in (a kernel stub's pointer, a copy kernel)
    "kernel_stub_named_with_an_iterator": 'extern void* stub asm("_ZN2at6native12DispatchStubIPFvRNS_14Tensor'
                                          'IteratorEENS0_29or_stub_DECLARE_DISPATCH_typeEE7DEFAULTE"); '
                                          'void* f() { return stub; }',
    "copy_kernel_named_with_overlaps": 'void c() asm("_ZN2at6native22copy_ignoring_overlapsERKNS_10TensorBaseES3_");'
                                       ' void f() { c(); }',
}
HONEST = {  # what honest extensions import from libtorch_cpu (the names a real build imports)
    "dispatcher_entry": 'void m() asm("_ZN2at4_ops2mm4callERKNS_6TensorES4_"); void f() { m(); }',
    "data_pointer": 'void p() asm("_ZNK2at10TensorBase8data_ptrIfEEPT_v"); void f() { p(); }',
    "parallel_for_thread": 'void t() asm("_ZN2at14get_thread_numEv"); void f() { t(); }',
    "sleef_vector_exp": 'extern "C" void Sleef_expf8_u10(); void f() { Sleef_expf8_u10(); }',
    "libm": 'extern "C" float expf(float); float f(float x) { return expf(x); }',
    "iterator_member": 'void n() asm("_ZNK2at18TensorIteratorBase5numelEv"); void f() { n(); }',
    "overlap_check": 'void o() asm("_ZN2at20has_internal_overlapERKNS_10TensorBaseE"); void f() { o(); }',
    "shape_check": 'void c() asm("_ZN2at8checkDimEPKcRKNS_6TensorES1_il"); void f() { c(); }',
}
WALKED = {
    "symbol_table_walk": '#include <link.h>\nint cb(struct dl_phdr_info*, size_t, void*) { return 0; }\n'
                         'void f() { dl_iterate_phdr(cb, nullptr); }',
    "observer_of_every_op": 'void a() asm("_ZN2at17addGlobalCallbackENS_22RecordFunctionCallbackE"); '
                            'void f() { a(); }',
}


@pytest.fixture(scope="module")
def built():
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.fail("no C++ compiler: these red-team checks build tiny shared objects")
    d = Path(tempfile.mkdtemp(prefix="km-torchlib-"))
    out = {}
    for name, src in {**TAKEN, **HONEST, **WALKED}.items():
        (d / f"{name}.cpp").write_text(src + "\n")
        so = d / f"{name}.so"
        subprocess.run([cxx, "-shared", "-fPIC", "-o", str(so), str(d / f"{name}.cpp")], check=True)
        out[name] = so
    return out


@pytest.mark.parametrize("name", sorted(TAKEN))
def test_code_taken_from_pytorchs_library_by_any_name_is_c01(built, name):
    found = scan_library(built[name])
    assert any("takes code from PyTorch's libtorch" in f for f in found), (name, found)


@pytest.mark.parametrize("name", sorted(HONEST))
def test_what_honest_extensions_take_from_pytorch_is_allowed(built, name):
    assert torch_imports(built[name]) == [] and scan_library(built[name]) == [], name


def test_walking_the_loaded_libraries_symbol_tables_is_flagged(built):
    assert any("symbol tables" in f for f in scan_library(built["symbol_table_walk"]))


def test_an_observer_of_every_op_is_tampering_in_the_binary(built):
    assert any("addGlobalCallback" in f for f in scan_tampering([], built["observer_of_every_op"]))


@pytest.mark.parametrize("src", [
    'auto t = A.attr("__class__").attr("__deepcopy__").attr("__globals__")["torch"];',
    'PyObject* b = PyEval_GetBuiltins();',
    'static auto h = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end));',
    'c10::Dispatcher::singleton().addRegistrationListener(std::make_unique<Grab>());',
    'TORCH_LIBRARY_IMPL(aten, CPU, m) { m.impl("mm", &my_mm); }',
    'auto& tls = at::get_record_function_tls_();',
    # the same routes with the names pasted together by the candidate's own macros (read expanded)
    '#define J(a, b) a##b\nauto t = A.J(at, tr)("x");',
    '#define G(x) x\n#define H G(__glo##bals__)\nauto g = f.attr(H);',
    'PyObject* g = Py_TYPE(a)->tp_getattro(a, name);',
    '#define CALLBACK at::add##Global##Callback\nstatic auto h = CALLBACK(cb);',
])
def test_cxx_that_walks_python_objects_or_watches_every_op_is_c11(src):
    assert scan_tampering([src]), src


@pytest.mark.parametrize("src", [
    'TORCH_LIBRARY(myops, m) { m.def("gemm(Tensor a, Tensor b) -> Tensor"); }\n'
    'TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("gemm", &gemm); }',
    'at::parallel_for(0, n, 64, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; i++) y[i] = x[i]; });',
    'cudaPointerAttributes attr; cudaPointerGetAttributes(&attr, p); int t = attr.type;',
    '#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")\n'
    '#define KERNEL(name) __global__ void name##_kernel(float* y)\nKERNEL(relu) { y[0] = 0.f; }',
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("f", &f, py::arg("x"), py::call_guard<py::gil_scoped_release>()); }',
])
def test_honest_cxx_is_not_tampering(src):
    assert scan_tampering([src]) == [], src


# --------------------------------------------------------------- end to end on the cpu backend (one batch)
MATMUL_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)

def get_inputs():
    return [torch.randn(64, 96), torch.randn(96, 48)]

def get_init_inputs():
    return []
'''

_PY = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="{name}", cpp_sources=CPP, functions=["mm_fwd"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.mm_fwd(A.contiguous(), B.contiguous())
'''


def _program(name: str, cpp: str) -> str:
    return "CPP = r'''\n" + cpp + "\n'''\n" + _PY.replace("{name}", name)


PROGRAMS = {
    # MKL's Fortran entry point, exported by libtorch_cpu: no dispatcher, no monitor
    "c01_fortran_sgemm": _program("mm_a", r'''
#include <torch/extension.h>
extern "C" void SGEMM(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                      const int*, const float*, const int*, const float*, float*, const int*);
torch::Tensor mm_fwd(torch::Tensor A, torch::Tensor B) {
    int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    float one = 1.f, zero = 0.f;
    SGEMM("N", "N", &N, &M, &K, &one, B.data_ptr<float>(), &N, A.data_ptr<float>(), &K, &zero, C.data_ptr<float>(), &N);
    return C;
}'''),
    # torch reached through a tensor's class and a function's globals, then a redispatch below both monitors
    "c11_python_objects_walked_from_cxx": _program("mm_b", r'''
#include <torch/extension.h>
namespace py = pybind11;
torch::Tensor mm_fwd(py::object A, py::object B) {
    py::object t = A.attr("__class__").attr("__deepcopy__").attr("__globals__")["torch"];
    py::object C = t.attr("_C");
    py::object ks = C.attr("DispatchKeySet")(C.attr("DispatchKey").attr("CPU"));
    return t.attr("ops").attr("aten").attr("mm").attr("default").attr("redispatch")(ks, A, B).cast<torch::Tensor>();
}'''),
    "honest_parallel_for_matmul": _program("mm_c", r'''
#include <torch/extension.h>
#include <ATen/Parallel.h>
torch::Tensor mm_fwd(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes");
    int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    AT_DISPATCH_FLOATING_TYPES(A.scalar_type(), "mm_fwd", [&] {
        const scalar_t* a = A.data_ptr<scalar_t>();
        const scalar_t* b = B.data_ptr<scalar_t>();
        scalar_t* c = C.data_ptr<scalar_t>();
        at::parallel_for(0, M, 8, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; i++)
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0;
                    for (int64_t k = 0; k < K; k++) acc += (double)a[i * K + k] * b[k * N + j];
                    c[i * N + j] = (scalar_t)acc;
                }
        });
    });
    return C;
}'''),
}


@pytest.fixture(scope="module")
def verdicts():
    return fx.verify_cpu(MATMUL_TASK, PROGRAMS, tempfile.mkdtemp(prefix="km-torchlib-e2e-"), task_name="mm_routes")


def test_vendor_code_from_pytorchs_library_is_a_cheat_end_to_end(verdicts):
    v = verdicts["c01_fortran_sgemm"]
    assert v.status == "cheat" and "C01_TORCH_COMPUTE" in v.cheats, v.feedback
    assert "SGEMM" in v.feedback


def test_python_objects_walked_from_cxx_are_a_cheat_end_to_end(verdicts):
    v = verdicts["c11_python_objects_walked_from_cxx"]
    assert v.status == "cheat" and "C11_MONKEYPATCH" in v.cheats, v.feedback


def test_honest_twin_passes(verdicts):
    v = verdicts["honest_parallel_for_matmul"]
    assert v.status == "pass", v.feedback


def test_honest_cpp_idioms_take_nothing_that_computes():
    """A third red team's honest look-alikes, each C01 before (their imports were off the allowlist): a tensor over
    the extension's own buffer (``torch::from_blob(...).clone()``: at::TensorMaker), a profiler range around its own
    work (``RECORD_FUNCTION``), and an out variant sized with ``out.resize_as_(x)``."""
    from verifier.common.ops import forbidden
    from verifier.front.binary import taken_from_torch

    honest = [b"_ZN2at11TensorMaker11make_tensorEv", b"_ZN2at14RecordFunctionC1ENS_11RecordScopeE",
              b"_ZN2at14RecordFunctionD1Ev",
              b"_ZN2at14RecordFunction6beforeESt7variantIJSt17basic_string_viewIcSt11char_traitsIcEESt17reference_"
              b"wrapperIKN3c1014FunctionSchemaEEEEl"]
    assert [s for s in honest if taken_from_torch(s)] == []
    assert forbidden(["aten::resize_as_", "aten::resize_"]) == []
    # what still computes below the dispatcher is not let in beside them
    assert taken_from_torch(b"_ZN2at3cpu2mmERKNS_6TensorES3_") and forbidden(["aten::mm"]) == ["aten::mm"]


def test_the_inference_mode_guard_is_no_tampering_but_its_imports_hide_nothing_else():
    """``c10::InferenceMode guard;`` in the extension (honest: autograd off in its scope) imports the thread's
    dispatch-key TLS, as a hand-made key set would: let through only where the sources name the guard, spell no TLS
    route and bind no declaration to another symbol with an asm label."""
    from verifier.front.binary import _GUARD_TLS
    from verifier.front.vendor import inference_mode_only

    honest = ("torch::Tensor relu(torch::Tensor x) {\n  c10::InferenceMode guard;\n  auto out = torch::empty_like(x);\n"
              "  asm volatile(\"\" ::: \"memory\");\n  return out;\n}\n")
    assert inference_mode_only([honest]) and inference_mode_only(["at::InferenceMode mode(true);"])
    assert not inference_mode_only(["torch::Tensor f(torch::Tensor x) { return x; }"])  # no guard named
    assert not inference_mode_only([honest + "void set(c10::impl::PODLocalDispatchKeySet k) { "
                                             "c10::impl::_force_tls_local_dispatch_key_set(k); }"])
    assert not inference_mode_only([honest + 'void keys(int) __asm__("_ZN3c104impl33_force_tls_local_dispatch_'
                                             'key_setENS0_21PODLocalDispatchKeySetE");'])
    assert _GUARD_TLS.match(b"_ZN3c104impl26raw_local_dispatch_key_setE")
    assert not _GUARD_TLS.match(b"_ZN3c104impl25tls_set_dispatch_key_excludedENS_11DispatchKeyEb")
