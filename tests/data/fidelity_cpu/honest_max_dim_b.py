import tempfile
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

// values of max over `dim` written into a preallocated output
void max_over_dim_out(const torch::Tensor& x, torch::Tensor& out, int64_t dim) {
    TORCH_CHECK(x.is_contiguous() && out.is_contiguous(), "contiguous tensors expected");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    const int64_t R = x.size(dim);
    const float* p = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, outer, 1, [&](int64_t a, int64_t b) {
        for (int64_t ob = a; ob < b; ++ob) {
            float* dst = o + ob * inner;
            const float* src = p + ob * R * inner;
            for (int64_t i = 0; i < inner; ++i) dst[i] = src[i];
            for (int64_t r = 1; r < R; ++r) {
                const float* row = src + r * inner;
                for (int64_t i = 0; i < inner; ++i) {
                    const float v = row[i];
                    if (v > dst[i] || std::isnan(v)) dst[i] = v;
                }
            }
        }
    });
}
"""

max_ext = load_inline(
    name="max_over_dim_out",
    cpp_sources=[cpp],
    functions=["max_over_dim_out"],
    extra_cflags=["-O3"],
    build_directory=tempfile.mkdtemp(),
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim if self.dim >= 0 else self.dim + x.dim()
        out_shape = list(x.shape[:dim]) + list(x.shape[dim + 1:])
        with torch.autograd.profiler.record_function("max_over_dim_out"):
            out = x.new_empty(out_shape)
            max_ext.max_over_dim_out(x, out, dim)
        return out
