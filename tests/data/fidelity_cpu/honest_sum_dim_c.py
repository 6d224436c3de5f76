import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

// fast path: inner size a multiple of 8, 8 independent accumulators per step
torch::Tensor sum_dim_fast(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_contiguous(), "fast path needs a contiguous input");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    TORCH_CHECK(inner % 8 == 0, "fast path needs inner % 8 == 0");
    const int64_t R = x.size(dim);
    auto shape = x.sizes().vec();
    shape[dim] = 1;
    auto out = torch::empty(shape, x.options());
    const float* p = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, outer, 1, [&](int64_t o0, int64_t o1) {
        for (int64_t ob = o0; ob < o1; ++ob) {
            for (int64_t i = 0; i < inner; i += 8) {
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int64_t r = 0; r < R; ++r) {
                    const float* q = p + (ob * R + r) * inner + i;
                    for (int l = 0; l < 8; ++l) acc[l] += q[l];
                }
                for (int l = 0; l < 8; ++l) o[ob * inner + i + l] = acc[l];
            }
        }
    });
    return out;
}

// generic path: any strides
torch::Tensor sum_dim_generic(torch::Tensor x, int64_t dim) {
    auto xc = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < xc.dim(); ++d) inner *= xc.size(d);
    const int64_t R = xc.size(dim);
    auto shape = xc.sizes().vec();
    shape[dim] = 1;
    auto out = torch::zeros(shape, xc.options());
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t ob = 0; ob < outer; ++ob)
        for (int64_t r = 0; r < R; ++r)
            for (int64_t i = 0; i < inner; ++i) o[ob * inner + i] += p[(ob * R + r) * inner + i];
    return out;
}
"""

sum_ext = load_inline(name="sum_dim_fast_generic", cpp_sources=src, functions=["sum_dim_fast", "sum_dim_generic"],
                      extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        dim = self.dim % x.dim()
        try:
            return sum_ext.sum_dim_fast(x, dim)
        except RuntimeError:
            # shapes the fast path does not handle: the generic kernel
            return sum_ext.sum_dim_generic(x, dim)
