"""Red team of C++ that reaches Python objects through pybind11 or the C API (C11): a cheat accepted.

A matmul candidate's C++ cast its input tensors to Python objects and computed the product in numpy, spelling
pybind11's attribute read through a pointer: ``(&pa)->attr("numpy")()``, ``(&na)->attr("dot")(nb)``, the result's
address read from ``.ctypes.data``. No monitor sees numpy compute, the sources' scan matched ``.attr(`` but not
``->attr(``, and the binary's imports cannot tell it from an honest extension (pybind11 is header-only and imports
the C API for itself): it passed the strict policy.

Closed at the root in the source scan (front/vendor.py ``PYTHON_SOURCE``): every spelling of the routes from C++ to a
Python object is C11 whatever the qualification: pybind11's attribute reads (``.attr(``, ``->attr(``, the member
``&py::object::attr``, ``.template attr``, an unqualified ``attr(`` in a class built on ``py::object``, its accessor
types), ``getattr(`` by any qualification, module imports by any spelling (``py::module_::import``, an alias's
``M::import``, ``m.import``), any name of the C API (``PyObject_GetAttr*``, ``PyObject_Call*``,
``PyObject_Vectorcall*``, ``_PyObject_MakeTpCall``, ``PyEval_GetBuiltins``, ``PyDict_GetItem*``,
``PyNumber_MatrixMultiply``), a type's slots (``Py_TYPE(o)->tp_call``), pybind11's internals and eval. Honest twins:
pybind11's bindings (``PYBIND11_MODULE``, ``m.def``, ``py::class_``, ``py::arg``, ``py::init``, ``py::enum_``,
``py::call_guard``), torch's tensor methods (``accessor<>``), CUDA's attribute structs and ``tp_size`` names pass.

In the binary: every honest pybind11 extension imports PyObject_GetAttrString, PyEval_GetBuiltins,
PyDict_GetItemWithError and PyObject_CallFunctionObjArgs, one with a ``py::class_`` PyObject_Vectorcall and
PyObject_GetAttr, and honest CUDA extensions built against torch 2.11 PyObject_CallObject (85 of tests/gpu's on an
H200, where a binary rule on the C API's calls made every one of them C11), so the binary's calls of Python objects
say nothing and the sources decide; a twin binary importing them passes the binary scan. Unit cases for each
spelling, a tiny shared object for the binary, and the cheat end to end on the cpu backend.
"""

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.front.binary import scan_tampering
from verifier.front.vendor import scan_sources

NUMPY_MATMUL = r'''
#include <torch/extension.h>
#include <cstring>
namespace py = pybind11;

torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    a = a.contiguous(); b = b.contiguous();
    auto out = torch::empty({a.size(0), b.size(1)}, a.options());
    py::object pa = py::cast(a), pb = py::cast(b);
    py::object na = (&pa)->attr("numpy")();
    py::object nb = (&pb)->attr("numpy")();
    py::object prod = (&na)->attr("dot")(nb);
    py::object ct = (&prod)->attr("ctypes");
    py::object addr = (&ct)->attr("data");
    const float* src = reinterpret_cast<const float*>(addr.cast<intptr_t>());
    std::memcpy(out.data_ptr<float>(), src, out.numel() * sizeof(float));
    return out;
}
'''
# each a way from C++ to a Python attribute, module, builtin or call
SPELLINGS = {
    "attr_through_a_pointer": 'py::object f = (&o)->attr("numpy")();',
    "attr_through_a_pointer_spaced": 'py::object f = p -> attr ("numpy");',
    "attr_as_a_member_pointer": 'auto get = &py::object::attr;',
    "attr_as_a_dependent_template": 'auto f = o.template attr("numpy");',
    "attr_unqualified_in_a_derived_class": 'struct Obj : py::object { py::object np() { return attr("numpy")(); } };',
    "attr_accessor_type": 'py::detail::str_attr_accessor acc(o, "numpy");',
    "attr_accessor_policy": 'auto f = py::detail::accessor_policies::str_attr::get(o.ptr(), "numpy");',
    "getattr_qualified": 'auto f = pybind11::getattr(o, "numpy");',
    "import_through_an_alias": 'using M = py::module_;\nauto np = M::import("numpy");',
    "import_through_the_module_object": 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { auto np = m.import("numpy"); }',
    "import_old_spelling": 'auto np = pybind11::module::import("numpy");',
    "c_api_getattr": 'PyObject* f = PyObject_GetAttrString(o, "numpy");',
    "c_api_call": 'PyObject* r = PyObject_Call(f, args, nullptr);',
    "c_api_vectorcall": 'PyObject* r = PyObject_Vectorcall(f, argv, 1, nullptr);',
    "c_api_tp_call": 'PyObject* r = _PyObject_MakeTpCall(ts, f, argv, 1, nullptr);',
    "c_api_builtins_item": 'PyObject* imp = PyDict_GetItemString(PyEval_GetBuiltins(), "__import__");',
    "c_api_number_protocol": 'PyObject* r = PyNumber_MatrixMultiply(a, b);',
    "type_slot_called": 'PyObject* r = Py_TYPE(f)->tp_call(f, args, nullptr);',
    "pybind11_internals": 'auto& in = py::detail::get_internals();',
    "eval_file": 'py::eval_file("helper.py");',
    "arrow_attr_pasted_by_a_macro": '#define GET(p, n) (p)->at##tr(n)\npy::object f = GET(&o, "numpy")();',
}


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_every_route_from_cpp_to_a_python_object_is_c11(name):
    found = scan_tampering([SPELLINGS[name]])
    assert any("reaches Python objects" in f for f in found), (name, found)


def test_the_numpy_matmul_through_pointer_attr_reads_is_c11():
    found = scan_tampering([NUMPY_MATMUL])
    assert any("reaches Python objects" in f and "->attr" in f for f in found), found


HONEST = {
    "shared_fixture_extension": fx.SHARED_CPP,
    "bindings": (
        'enum class Mode { Fast, Exact };\n'
        'struct Relu { float slope; explicit Relu(float s) : slope(s) {} torch::Tensor run(torch::Tensor x); };\n'
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n'
        '    py::enum_<Mode>(m, "Mode").value("Fast", Mode::Fast).value("Exact", Mode::Exact);\n'
        '    py::class_<Relu>(m, "Relu").def(py::init<float>(), py::arg("slope") = 0.f)\n'
        '        .def("run", &Relu::run, py::call_guard<py::gil_scoped_release>())\n'
        '        .def_readwrite("slope", &Relu::slope);\n'
        '    m.def("relu", &relu, "relu", py::arg("x"), py::arg("chunk") = py::none());\n'
        '    pybind11::module_ sub = m.def_submodule("ops");\n'
        '}'),
    "tensor_methods": ('auto a = x.accessor<float, 2>(); auto p = x.packed_accessor32<float, 2>();\n'
                       'auto y = x.to(torch::kFloat).contiguous().sum(); auto o = torch::empty_like(x, x.options());\n'
                       'TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");'),
    "cuda_attribute_structs": ('cudaFuncAttributes attr; cudaFuncGetAttributes(&attr, kernel);\n'
                               'int regs = attr.numRegs;\ncudaLaunchAttribute attrs[1]; attrs[0].id = '
                               'cudaLaunchAttributeCooperative; config.attrs = attrs; config.numAttrs = 1;'),
    "tensor_parallel_names_and_attributes": ('int tp_size = 4, tp_rank = 0; Py_ssize_t n = 0;\n'
                                             '__attribute__((always_inline)) inline float f(float v) { return v; }'),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_pybind11_bindings_and_tensor_methods_are_not_flagged(name):
    assert scan_tampering([HONEST[name]]) == [] and scan_sources([HONEST[name]]) == [], name


# ---- the binary: what honest extensions import to call Python objects (pybind11's own calls, and torch 2.11's CUDA
# headers' PyObject_CallObject) is no finding there
PYBIND11_OWN = ('extern "C" { void* PyObject_Vectorcall(void*, void**, unsigned long, void*);\n'
                'void* PyObject_CallFunctionObjArgs(void*, ...); void* PyObject_GetAttrString(void*, const char*);\n'
                'void* PyObject_GetAttr(void*, void*); void* PyEval_GetBuiltins(); void* PyObject_CallObject(void*, void*);\n'
                'void* PyDict_GetItemWithError(void*, void*); }\n'
                'void* f(void* o) { PyObject_GetAttrString(o, "x"); PyObject_GetAttr(o, o); PyEval_GetBuiltins();\n'
                '    PyDict_GetItemWithError(o, o); PyObject_CallFunctionObjArgs(o, nullptr); PyObject_CallObject(o, o);\n'
                '    return PyObject_Vectorcall(o, nullptr, 0, nullptr); }')
IMPORTS_A_MODULE = ('extern "C" void* PyImport_ImportModule(const char*);\n'
                    'void* f() { return PyImport_ImportModule("numpy"); }')


def test_the_binary_flags_module_imports_and_not_the_calls_honest_extensions_make():
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.fail("no C++ compiler: this red-team check builds tiny shared objects")
    d = Path(tempfile.mkdtemp(prefix="km-pycall-"))
    built = {}
    for name, src in (("imports", IMPORTS_A_MODULE), ("pybind11_own", PYBIND11_OWN)):
        (d / f"{name}.cpp").write_text(src + "\n")
        built[name] = d / f"{name}.so"
        subprocess.run([cxx, "-shared", "-fPIC", "-o", str(built[name]), str(d / f"{name}.cpp")], check=True)
    found = scan_tampering([], built["imports"])
    assert any("reaches Python modules" in f and "PyImport_ImportModule" in f for f in found), found
    assert scan_tampering([], built["pybind11_own"]) == []


# ---- end to end: the numpy matmul is a cheat under the strict policy (stopped by the source scan, before any build)
CHEAT = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{NUMPY_MATMUL}"""
ext = load_inline(name="mm_np", cpp_sources=CPP, functions=["mm"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.mm(a, b)
'''


def test_numpy_reached_from_cpp_is_a_cheat_end_to_end(shared_build_dir):
    task = Task.from_code(fx.MATMUL_TASK, name="python_from_cpp", source="seed", level=1)
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=0, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, exec_workers=1, legality="strict")
    item = (task, Candidate(candidate_id="numpy_by_pointer_attr", task_id=task.task_id, backend="cpu",
                            generator="redteam", code=CHEAT))
    v = verify_batch([item], config=cfg, compile_workers=1)[0]
    assert v.status == "cheat" and cheats.C11 in v.cheats, (v.status, v.cheats, v.feedback[:800])
    assert v.pass_strict is not True and v.pass_partial is not True
    assert "->attr" in v.feedback, v.feedback[:800]
