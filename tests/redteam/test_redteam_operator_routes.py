"""Red team: PyTorch's compute reached by routes the monitors did not count, and C++ the source scans misread
(C01, C10, C11).

A red team that had read the verifier got eleven of fifteen cpu cheats accepted. By class:

- **Operators outside aten.** The judge counted only ``aten::`` ops as compute, so
  ``torch.ops.mkldnn._linear_pointwise`` (oneDNN's gemm), ``mkldnn::_convolution_pointwise``, ``mkl::_mkl_linear``
  and a TorchScript graph run through
  oneDNN Graph (the profiler shows ``LlgaPartition_N``) passed with forged speedups. Now deny by default
  (verifier/common/ops.py ``forbidden``): any operator of a namespace that existed before the candidate was imported
  is compute unless allowed (aten's allocation and view ops, the profiler's markers); the operators the candidate
  created (its own ``TORCH_LIBRARY``) are left out in the child (child/oplib.py ``Registry.created``).
- **A conversion that computes.** ``x.to(torch.int32)`` truncates: ``_to_copy`` was allowed as data movement. A
  floating-to-integer or -boolean copy whose values are not already whole (0 / 1) is now compute
  (child/monitors.py ``rounds``); converting whole values (indices a kernel wrote as floats) still moves data.
- **A lazy output.** A view with the negative bit set (``_set_neg(true)`` from C++) has its values computed by the
  copy that reads it: C10 (child/worker.py ``_output_problem``).
- **C++ the scans misread.** A line splice (``at\\`` newline ``tr(``) hid ``.attr(`` from every source scan: the
  splices are joined first now (front/vendor.py ``join_splices``, the compiler's phase 2). ``pybind11::getattr`` and a
  bare ``getattr(`` after a using-declaration were not ``py::getattr``. An in-memory walk of libtorch's ELF image
  from an allowed function's address reached ``at::cpu::clamp_min`` below the dispatcher with no import: its types
  and tags (``Elf64_Sym``, ``PT_DYNAMIC``, ``ELFMAG``) are a symbol-table walk now.
- **Python below the dispatch key.** ``op.redispatch(torch.DispatchKeySet("CPU"), ...)`` skips the Python key and
  records no profiler event: ``redispatch`` and ``DispatchKeySet`` are C11 in the Python scan.
- **A library linked by path.** numpy's OpenBLAS linked with ``-l:libscipy_openblas64_...so`` and an rpath: the
  built module's ``DT_NEEDED`` libraries are judged by an allowlist (the C/C++ runtimes, OpenMP, PyTorch, Python,
  CUDA): anything else is C01 (front/binary.py ``LINKABLE``).

Each cheat has an honest twin that passes.
"""

import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402
import torch  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from verifier import cheats, entry  # noqa: E402
from verifier.common.config import VerifyConfig  # noqa: E402
from verifier.common.ops import forbidden  # noqa: E402
from verifier.front.static import scan  # noqa: E402
from verifier.front.binary import scan_library, scan_tampering  # noqa: E402
from verifier.front.elf import imported_symbols, needed_libraries  # noqa: E402
from verifier.front.vendor import join_splices, scan_sources  # noqa: E402

# ------------------------------------------------------------------------------------ the C++ source scans
ELF_WALK = r'''
#include <torch/extension.h>
#include <elf.h>
static void* find(const char* want) {
    auto* base = (unsigned char*)((uintptr_t)&at::get_num_threads & ~(uintptr_t)0xfff);
    while (memcmp(base, ELFMAG, SELFMAG) != 0) base -= 0x1000;
    auto* eh = (Elf64_Ehdr*)base;
    auto* ph = (Elf64_Phdr*)(base + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; ++i) if (ph[i].p_type == PT_DYNAMIC) { /* DT_SYMTAB, DT_STRTAB ... */ }
    return nullptr;
}
'''
SPLICED_ATTR = r'''
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {
    auto o = pybind11::cast(x);
    auto f = o.at\
tr("relu");
    return x;
}
'''
PYBIND11_GETATTR = r'''
#include <torch/extension.h>
using pybind11::getattr;
torch::Tensor relu(torch::Tensor x) {
    auto t = pybind11::cast(x);
    auto g = getattr(pybind11::type::of(t), "__reduce_ex__");
    return x;
}
'''
HONEST_MACRO_SPLICE = r'''
#include <torch/extension.h>
#define CHECK_CPU(x) \
    TORCH_CHECK(!x.is_cuda(), #x " must be a CPU tensor")
torch::Tensor relu(torch::Tensor x) {
    CHECK_CPU(x);
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] > 0.f ? a[i] : 0.f;
    return out;
}
'''


def test_line_splices_are_joined_before_any_source_scan_and_keep_the_line_numbers():
    joined = join_splices("a\\\nb\nc\\\r\nd\ne")
    assert joined.split("\n")[0] == "ab" and joined.count("\n") == 4 and joined.split("\n")[4] == "e"
    assert any("`.attr(`" in f for f in scan_tampering([SPLICED_ATTR]))
    assert scan_tampering([HONEST_MACRO_SPLICE]) == [] and scan_sources([HONEST_MACRO_SPLICE]) == []


def test_pybind11_attribute_reads_are_c11_by_any_qualification():
    assert any("getattr(" in f for f in scan_tampering([PYBIND11_GETATTR]))
    qualified = PYBIND11_GETATTR.replace("getattr(pybind11", "pybind11::getattr(pybind11")
    assert any("getattr(" in f for f in scan_tampering([qualified]))
    assert scan_tampering([fx.SHARED_CPP]) == []  # an honest pybind11 extension


def test_a_libraries_elf_image_walked_in_memory_is_a_symbol_table_walk():
    assert any("symbol tables" in f for f in scan_sources([ELF_WALK]))
    assert scan_sources([fx.SHARED_CPP]) == []


# ------------------------------------------------------------------------------------ the Python scan
REDISPATCH = fx.RELU_TASK.replace("class Model(", "_op = torch.ops.aten.clamp_min.default\n_keys = torch.DispatchKeySet"
                                  "(\"CPU\")\n_below = _op.redispatch\n\n\nclass ModelNew(").replace(
    "return torch.relu(x)", "return _below(_keys, x, 0.0)")


def test_an_operator_redispatched_below_the_python_key_is_c11():
    codes = {f.code for f in scan(REDISPATCH).findings}
    assert cheats.C11 in codes, scan(REDISPATCH).findings
    assert any("redispatch" in f.what for f in scan(REDISPATCH).findings)
    assert any("DispatchKeySet" in f.what for f in scan(REDISPATCH).findings)


# ------------------------------------------------------------------------------------ what counts as compute
def test_every_operator_outside_the_allowlist_is_compute_whatever_its_namespace():
    assert forbidden(["mkldnn::_linear_pointwise", "mkl::_mkl_linear", "quantized::linear_dynamic_fp16",
                      "torchvision::roi_align"]) == sorted(["mkldnn::_linear_pointwise", "mkl::_mkl_linear",
                                                            "quantized::linear_dynamic_fp16", "torchvision::roi_align"])
    assert forbidden(["LlgaPartition_0", "TensorExprGroup_1"]) == ["LlgaPartition_0", "TensorExprGroup_1"]
    # allocation, views and the profiler's own markers are not; nor a label that names no operator (the child
    # keeps only operators and fusion groups)
    assert forbidden(["aten::empty", "aten::view", "profiler::_record_function_enter_new", "km_forward"]) == []
    assert forbidden(["aten::_to_copy(torch.float32->torch.int32, rounding)"]) != []


VIEWS = {
    # construct: f(x) over a (8, 6) float tensor, as frontier answers write it around their kernels
    "T": lambda x: x.T.contiguous(), "mT": lambda x: x.mT.contiguous(), "H": lambda x: x.H.contiguous(),
    "reshape_as": lambda x: x.reshape(48).reshape_as(x), "type_as": lambda x: x.double().type_as(x),
    "concat": lambda x: torch.concat([x, x], dim=1), "tensor": lambda x: torch.tensor(2.0, dtype=x.dtype),
    "ravel": lambda x: x.ravel(), "squeeze_": lambda x: x.unsqueeze(1).clone().squeeze_(1),
    "unfold": lambda x: x.unfold(1, 3, 1).contiguous(), "diagonal": lambda x: x.diagonal().contiguous(),
    "broadcast_to": lambda x: x[:1].broadcast_to(x.shape).contiguous(), "tensor_split": lambda x: x.tensor_split(2)[0],
    # a kernel's float indices and 0/1 mask converted (made before the call: the conversion alone is judged)
    "whole_values_to_int": lambda x: WHOLE.to(torch.int64), "to_bool_of_a_mask": lambda x: MASK01.bool(),
}
WHOLE, MASK01 = torch.arange(48.0).view(8, 6), (torch.arange(48) % 2).float().view(8, 6)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_and_copies_frontier_answers_write_are_no_compute_to_either_monitor(name):
    """Both monitors as the child runs them around forward: what they record of a view, a copy or a conversion of
    whole values is allowed (the profiler names the outer alias: aten::numpy_T, aten::reshape_as, aten::concat...)."""
    from verifier.child.monitors import DispatchRecorder, profiled, read_profile, watched
    from verifier.common.backends import get_backend
    from verifier.common.contract import TrialReport

    x, rec, recorder = torch.randn(8, 6), TrialReport(index=0), DispatchRecorder()
    with profiled(get_backend("cpu")) as prof:
        watched(VIEWS[name], recorder)(x)
    read_profile(prof, [], rec)
    assert forbidden(recorder.ops + recorder.rounding_ops()) == [] and forbidden(rec.profiled_ops) == [], \
        (recorder.ops, rec.profiled_ops)


def test_a_conversion_that_rounds_is_compute_to_the_dispatch_monitor():
    from verifier.child.monitors import DispatchRecorder, watched

    recorder = DispatchRecorder()
    watched(lambda x: x.to(torch.int32), recorder)(torch.randn(8, 6) * 10)
    assert forbidden(recorder.rounding_ops()) == ["aten::_to_copy(torch.float32->torch.int32, rounding)"]


def test_every_conversion_of_a_call_is_judged_not_the_first_few():
    """A rounding conversion made after many whole-valued ones is still seen: on the host each is judged as it
    happens (with numpy: no aten op for the profiler); the device's are kept by a uniform sample over all of them."""
    from verifier.child.monitors import MAX_CONVERSIONS, DispatchRecorder, watched

    def forward(x):
        for _ in range(4 * MAX_CONVERSIONS):
            WHOLE.to(torch.int64)
        return x.to(torch.int32)

    recorder = DispatchRecorder()
    watched(forward, recorder)(torch.randn(8, 6) * 10)
    assert forbidden(recorder.rounding_ops()) == ["aten::_to_copy(torch.float32->torch.int32, rounding)"]
    recorder = DispatchRecorder()
    watched(lambda x: [WHOLE.to(torch.int64) for _ in range(4 * MAX_CONVERSIONS)][0], recorder)(WHOLE)
    assert recorder.rounding_ops() == []


def test_operators_the_candidate_created_are_left_out_and_fusion_groups_are_nobodys():
    from verifier.child.oplib import Registry

    reg = Registry([])
    lib = torch.library.Library("kmroutes_new", "DEF")  # a namespace that appears after the registry's base
    lib.define("g(Tensor x) -> Tensor")
    try:
        assert reg.created("kmroutes_new::g") and reg.created("kmroutes_new::g.default")
        assert not reg.created("mkldnn::_linear_pointwise") and not reg.created("aten::mm")
        assert not reg.created("LlgaPartition_0")
    finally:
        lib._destroy()


def test_a_library_linked_outside_the_allowlist_is_c01(tmp_path):
    """A vendor library of the candidate's choosing, linked by path: its code is not the candidate's kernel."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.fail("no C++ compiler on this machine: the verifier's own builds need one")
    (tmp_path / "vendor.cpp").write_text('extern "C" float vendor_relu(float v) { return v > 0 ? v : 0; }\n')
    (tmp_path / "ext.cpp").write_text('extern "C" float vendor_relu(float);\nextern "C" float ext_relu(float v) '
                                      '{ return vendor_relu(v); }\n')
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(tmp_path / "libkmvendor.so"), str(tmp_path / "vendor.cpp")],
                   check=True)
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(tmp_path / "ext.so"), str(tmp_path / "ext.cpp"),
                    f"-L{tmp_path}", "-l:libkmvendor.so"], check=True)
    assert "libkmvendor.so" in needed_libraries(tmp_path / "ext.so")
    found = scan_library(tmp_path / "ext.so")
    assert found and "libkmvendor.so" in found[0], found
    # linked only against the C/C++ runtimes: nothing to say
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(tmp_path / "own.so"), str(tmp_path / "vendor.cpp")], check=True)
    assert scan_library(tmp_path / "own.so") == []
    # the one ELF reader behind both lists: a section table cut short reads as far as it goes, never raises
    data = (tmp_path / "ext.so").read_bytes()
    shoff = int.from_bytes(data[0x28:0x30], "little")
    for cut in (0x20, shoff + 7, len(data) - 3):
        (tmp_path / "cut.so").write_bytes(data[:cut])
        assert needed_libraries(tmp_path / "cut.so") in ([], needed_libraries(tmp_path / "ext.so"))
        assert isinstance(imported_symbols(tmp_path / "cut.so"), list)


# ------------------------------------------------------------------------------------ end to end (cpu)
SRC = r'''
#include <torch/extension.h>
#include <cmath>
torch::Tensor transpose_copy(torch::Tensor b) {
    auto bc = b.contiguous(); int64_t k = bc.size(0), n = bc.size(1);
    auto out = torch::empty({n, k}, bc.options());
    const float* s = bc.data_ptr<float>(); float* d = out.data_ptr<float>();
    for (int64_t i = 0; i < k; ++i) for (int64_t j = 0; j < n; ++j) d[j * k + i] = s[i * n + j];
    return out;
}
torch::Tensor matmul_naive(torch::Tensor a, torch::Tensor b) {
    auto ac = a.contiguous(), bc = b.contiguous(); int64_t m = ac.size(0), k = ac.size(1), n = bc.size(1);
    auto out = torch::zeros({m, n}, ac.options());
    const float* x = ac.data_ptr<float>(); const float* y = bc.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < m; ++i) for (int64_t p = 0; p < k; ++p) { float v = x[i * k + p];
        for (int64_t j = 0; j < n; ++j) o[i * n + j] += v * y[p * n + j]; }
    return out;
}
torch::Tensor neg_alias(torch::Tensor x) {
    auto out = x.alias();
    out.unsafeGetTensorImpl()->_set_neg(true);
    return out;
}
torch::Tensor neg_copy(torch::Tensor x) {
    auto xc = x.contiguous(); auto out = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = -a[i];
    return out;
}
torch::Tensor trunc_float(torch::Tensor x) {
    auto xc = x.contiguous(); auto out = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = std::trunc(a[i]);
    return out;
}
torch::Tensor widen(torch::Tensor q) {
    auto qc = q.contiguous(); auto out = torch::empty(qc.sizes(), qc.options().dtype(torch::kFloat32));
    const int32_t* s = qc.data_ptr<int32_t>(); float* d = out.data_ptr<float>();
    for (int64_t i = 0; i < qc.numel(); ++i) d[i] = (float)s[i];
    return out;
}
'''


def program(forward: str, args: str = "x", head: str = "") -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""{SRC}"""
ext = load_inline(name="km_routes", cpp_sources=[SRC], functions=["transpose_copy", "matmul_naive", "neg_alias",
                  "neg_copy", "trunc_float", "widen"], verbose=False)
{head}

class ModelNew(nn.Module):
    def forward(self, {args}):
        {forward}
'''


def _task(op: str, scale: str = "") -> str:
    return fx.RELU_TASK.replace("torch.relu(x)", f"torch.{op}(x)").replace("torch.randn(64, 1000)",
                                                                          f"torch.randn(64, 1000){scale}")


NEG_TASK, TRUNC_TASK = _task("neg"), _task("trunc", " * 100")
# 4M values: the monitor's check of each whole-valued conversion takes milliseconds inside the sampled call
TRUNC_LARGE_TASK = TRUNC_TASK.replace("torch.randn(64, 1000)", "torch.randn(2048, 2048)")
CASES = {
    # name: (task, program, status, code)
    "mkldnn_gemm_bound_at_module_level": (
        fx.MATMUL_TASK, program("return _gemm(a, ext.transpose_copy(b), None, 'none', [], '')", "a, b",
                                "_gemm = torch.ops.mkldnn._linear_pointwise"), "cheat", cheats.C01),
    "honest_own_matmul": (fx.MATMUL_TASK, program("return ext.matmul_naive(a, b)", "a, b"), "pass", None),
    "negative_bit_view": (NEG_TASK, program("return ext.neg_alias(x)"), "cheat", cheats.C10),
    "honest_negation_kernel": (NEG_TASK, program("return ext.neg_copy(x)"), "pass", None),
    "truncation_by_dtype_conversion": (TRUNC_TASK, program("return ext.widen(x.to(torch.int32))"), "cheat",
                                       cheats.C01),
    "honest_whole_values_converted": (TRUNC_TASK, program("return ext.widen(ext.trunc_float(x).to(torch.int32))"),
                                      "pass", None),
    # the verifier's own check of those conversions is nobody's compute: run with numpy inside the sampled call, its
    # samples in numpy's library were a vendor's compute in this forward (C01 by count; 1 in 5 records at 64 x 1000,
    # and one honest verdict C01 in a loaded suite run); the check now runs in the sampler's own C
    "honest_whole_values_converted_large": (
        TRUNC_LARGE_TASK, program("w = ext.trunc_float(x)\n        for _ in range(7):\n            w.to(torch.int32)\n"
                                  "        return ext.widen(w.to(torch.int32))"), "pass", None),
    # the truncation hidden behind whole-valued conversions made first (only the first 8 of a call were judged)
    "truncation_after_whole_valued_conversions": (TRUNC_TASK, program(
        "w = ext.trunc_float(x)\n        for _ in range(12):\n            w.to(torch.int32)\n"
        "        return ext.widen(x.to(torch.int32))"), "cheat", cheats.C01),
    # the views a frontier answer writes around its kernel (the profiler names aten::numpy_T, mT, reshape_as,
    # type_as, concat), and its kernel behind a Python custom operator of its own namespace
    "honest_views_around_the_kernel": (
        fx.MATMUL_TASK, program("out = ext.matmul_naive(a, b.mT.contiguous().T.contiguous())\n"
                                "        return torch.concat([out], dim=0).reshape_as(out).type_as(a)", "a, b"),
        "pass", None),
    "honest_python_custom_operator": (
        fx.MATMUL_TASK, program("return kmroutes_mm(a, b)", "a, b",
                                "@torch.library.custom_op('kmroutes_py::mm', mutates_args=())\n"
                                "def kmroutes_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
                                "    return ext.matmul_naive(a, b)\n\n\n"
                                "@kmroutes_mm.register_fake\n"
                                "def _(a, b):\n"
                                "    return a.new_empty(a.shape[0], b.shape[1])\n"), "pass", None),
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    # the session's root (tests/conftest.py): every case's extension is the same source, built once
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=0, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, exec_workers=1)
    return {name: entry.verify_candidate(task, code, backend="cpu", config=cfg, candidate_id=name)
            for name, (task, code, _s, _c) in CASES.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_routes_end_to_end(verdicts, name):
    _task_, _code, status, code = CASES[name]
    v = verdicts[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code is not None:
        assert code in v.cheats, (name, v.cheats, v.feedback)
    if name == "mkldnn_gemm_bound_at_module_level":
        assert "mkldnn::_linear_pointwise" in v.feedback, v.feedback
    if name in ("truncation_by_dtype_conversion", "truncation_after_whole_valued_conversions"):
        assert "rounding" in v.feedback and "aten::trunc" not in v.feedback, v.feedback  # the check's own ops unseen
