import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <omp.h>
#include <cstring>

// x viewed as (outer, R, inner); out (outer, inner). Accumulate whole rows so the inner loop is contiguous.
void reduce_rows_into(const torch::Tensor& x3, torch::Tensor& out2) {
    const int64_t outer = x3.size(0), R = x3.size(1), inner = x3.size(2);
    const float* __restrict__ xp = x3.data_ptr<float>();
    float* __restrict__ op = out2.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t o = 0; o < outer; ++o) {
        float* dst = op + o * inner;
        std::memset(dst, 0, sizeof(float) * inner);
        for (int64_t r = 0; r < R; ++r) {
            const float* src = xp + (o * R + r) * inner;
            #pragma omp simd
            for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
        }
    }
}

torch::Tensor sum_reduce(torch::Tensor x3) {
    TORCH_CHECK(x3.dim() == 3 && x3.is_contiguous(), "expects a contiguous (outer, R, inner) view");
    auto out = torch::empty({x3.size(0), x3.size(2)}, x3.options());
    reduce_rows_into(x3, out);
    return out;
}
"""

ext = load_inline(
    name="sum_reduce_rows",
    cpp_sources=cpp_source,
    functions=["sum_reduce"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        d = self.dim % x.dim()
        shape = list(x.shape)
        outer = 1
        for s in shape[:d]:
            outer *= s
        inner = 1
        for s in shape[d + 1:]:
            inner *= s
        x3 = x.contiguous().view(outer, shape[d], inner)
        out = ext.sum_reduce(x3)
        shape[d] = 1
        return out.view(shape)
