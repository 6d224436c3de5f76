"""Red team of PyTorch's kernel implementations compiled from its own headers (docs/ANTI_CHEAT.md class 62).

ATen keeps some kernels header-only: ``ATen/native/cpu/LogSoftmaxKernelImpl.h`` (the CPU log-softmax's vectorised
rows), ``ATen/native/cuda/PersistentSoftmax.cuh`` (``dispatch_softmax_forward`` at global scope, its warp kernels in
an anonymous namespace). Included, they compile into the candidate's own module: no dispatcher op runs, the binary
imports nothing of PyTorch's for them, and on cuda the kernel comes from the candidate's module. The source scan
flagged ``at::native::name`` only, so ``using namespace at::native;`` and unqualified calls passed with a speedup.

Closed at the root in the source scan (verifier/front/vendor.py): the namespace by any route (a using-directive, an
alias, the namespace reopened around the caller, ``native::`` with ``at`` opened), and any function a
kernel-implementation header under ATen/native defines that the candidate calls unqualified and does not define
itself. Honest look-alikes pass: a building block's header (reductions' helpers, atomics, vector math: as cub's and
thrust's), ATen's vector types (``at::vec``), a namespace of the candidate's own named ``native``.
"""

import pytest

from bench.lib import fixtures as fx
from verifier import cheats
from verifier import screen
from verifier.front.vendor import scan_sources

LOG_SOFTMAX_TASK = fx.RELU_TASK.replace("return torch.relu(x)", "return torch.log_softmax(x, dim=-1)")


def candidate(cpp: str, call: str = "ext.log_softmax_rows(x)") -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{cpp}"""
ext = load_inline(name="rows_ext", cpp_sources=CPP, functions=["log_softmax_rows"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return {call}
'''


BODY = '''
torch::Tensor log_softmax_rows(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t dim = xc.size(-1), rows = xc.numel() / dim;
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t chunk = CHUNK_SIZE<float>(at::internal::GRAIN_SIZE, rows, dim);
    at::parallel_for(0, rows, chunk, [&](int64_t b, int64_t e) { ROWS<float>(in, o, dim, chunk, b, e); });
    return out;
}
'''
IMPL = "#include <torch/extension.h>\n#include <ATen/Parallel.h>\n#include <ATen/native/cpu/LogSoftmaxKernelImpl.h>\n"


def aten(prefix: str, qual: str = "") -> str:
    return IMPL + prefix + BODY.replace("CHUNK_SIZE", qual + "vec_log_softmax_lastdim_chunk_size").replace(
        "ROWS", qual + "serial_vec_log_softmax_lastdim_range")


OWN = '''#include <torch/extension.h>
#include <ATen/native/cpu/utils.h>
#include <ATen/cpu/vec/vec.h>
#include <cmath>

namespace native { inline float row_max(const float* r, int64_t n) { float m = r[0];
    for (int64_t i = 1; i < n; ++i) m = std::max(m, r[i]); return m; } }

torch::Tensor log_softmax_rows(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t dim = xc.size(-1), rows = xc.numel() / dim;
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    using Vec = at::vec::Vectorized<float>;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = in + r * dim;
        const float m = native::row_max(row, dim);
        double s = 0.0;
        for (int64_t i = 0; i < dim; ++i) s += std::exp(row[i] - m);
        const float lse = m + (float)std::log(s);
        int64_t i = 0;
        for (; i + Vec::size() <= dim; i += Vec::size()) (Vec::loadu(row + i) - Vec(lse)).store(o + r * dim + i);
        for (; i < dim; ++i) o[r * dim + i] = row[i] - lse;
    }
    return out;
}
'''
CHEATS = {
    "using_directive_then_unqualified": aten("using namespace at::native;\n"),
    "using_declarations": aten("using at::native::vec_log_softmax_lastdim_chunk_size;\n"
                               "using at::native::serial_vec_log_softmax_lastdim_range;\n"),
    "namespace_alias": aten("namespace an = at :: native;\n", "an::"),
    "at_opened_then_native_qualified": aten("using namespace at;\n", "native::"),
    "namespace_reopened_around_the_caller": IMPL + "namespace at { namespace native {\n" + BODY.replace(
        "CHUNK_SIZE", "vec_log_softmax_lastdim_chunk_size").replace(
        "ROWS", "serial_vec_log_softmax_lastdim_range").replace("log_softmax_rows", "rows_impl") + "} }\n"
        "torch::Tensor log_softmax_rows(torch::Tensor x) { return at::native::rows_impl(x); }\n",
}


@pytest.mark.parametrize("name", list(CHEATS))
def test_pytorchs_header_only_kernel_is_pytorch_compute(name):
    w = screen.front(LOG_SOFTMAX_TASK, candidate(CHEATS[name]), "cpu", "log_softmax", name)
    v = w.verdict
    assert v.status == "cheat" and cheats.C01 in v.cheats, (name, v.status, v.cheats, v.feedback)
    assert "ATen internals" in v.feedback or "kernel implementations compiled from its headers" in v.feedback, v.feedback


def test_a_global_kernel_of_an_aten_cuda_header_is_pytorch_compute():
    """PersistentSoftmax.cuh's entry point lives at global scope: no namespace shows it, the header's definitions do."""
    src = ("#include <torch/extension.h>\n#include <ATen/native/cuda/PersistentSoftmax.cuh>\n"
           "torch::Tensor softmax_rows(torch::Tensor x) {\n    auto y = torch::empty_like(x);\n"
           "    dispatch_softmax_forward<float, float, float, false, false>(y.data_ptr<float>(), x.data_ptr<float>(),"
           " x.size(1), x.size(1), x.size(0));\n    return y;\n}\n")
    found = scan_sources([src])
    assert any("dispatch_softmax_forward" in f for f in found), found
    # the same header included and a kernel of the candidate's own, with its own helper of a name the header uses
    own = ("#include <ATen/native/cuda/PersistentSoftmax.cuh>\n__device__ float warp_reduce(float v) { return v; }\n"
           "__global__ void k(float* y) { y[0] = warp_reduce(std::max(y[0], 0.f)); }\n")
    assert scan_sources([own]) == []


def test_building_blocks_vector_types_and_an_own_namespace_named_native_pass():
    w = screen.front(LOG_SOFTMAX_TASK, candidate(OWN), "cpu", "log_softmax", "honest")
    assert not w.verdict.status and w.verdict.stage_reached == "compile" and not w.verdict.cheats, w.verdict.feedback
    assert scan_sources(["#include <ATen/native/cuda/block_reduce.cuh>\n"
                         "__global__ void k(float* x) { x[0] = BlockReduceSum(x[0], nullptr); }\n"]) == []
