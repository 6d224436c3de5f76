import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

reduce_src = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <vector>

torch::Tensor sum_dim_keepdim(torch::Tensor x, int64_t dim) {
    const int64_t nd = x.dim();
    if (dim < 0) dim += nd;
    TORCH_CHECK(dim >= 0 && dim < nd, "dim out of range");
    auto xc = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < nd; ++d) inner *= xc.size(d);
    const int64_t R = xc.size(dim);
    std::vector<int64_t> out_shape(xc.sizes().begin(), xc.sizes().end());
    out_shape[dim] = 1;
    auto out = torch::empty(out_shape, xc.options());
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, outer * inner, 64, [&](int64_t begin, int64_t end) {
        for (int64_t idx = begin; idx < end; ++idx) {
            const int64_t ob = idx / inner, ib = idx % inner;
            const float* p = in + ob * R * inner + ib;
            float acc = 0.0f;
            for (int64_t r = 0; r < R; ++r) acc += p[r * inner];
            o[idx] = acc;
        }
    });
    return out;
}
"""

sum_reduce = load_inline(name="sum_dim_keepdim_cpu", cpp_sources=reduce_src, functions=["sum_dim_keepdim"],
                         extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_reduce.sum_dim_keepdim(x, self.dim)
