import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rev_cumsum_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

// reverse inclusive scan along the last dim with Kahan-compensated summation
torch::Tensor reverse_cumsum_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == at::kFloat, "float32 expected");
    auto xc = x.contiguous();
    const int64_t L = xc.size(-1);
    const int64_t rows = xc.numel() / L;
    auto y = torch::empty_like(xc);
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = xp + r * L;
            float* yr = yp + r * L;
            float sum = 0.f, comp = 0.f;
            for (int64_t i = L - 1; i >= 0; --i) {
                const float yv = xr[i] - comp;
                const float t = sum + yv;
                comp = (t - sum) - yv;
                sum = t;
                yr[i] = sum;
            }
        }
    });
    return y;
}
"""

rev_cumsum = load_inline(name="reverse_cumsum_kahan", cpp_sources=rev_cumsum_source,
                         functions=["reverse_cumsum_lastdim"], extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        if self.dim == x.dim() - 1 or self.dim == -1:
            return rev_cumsum.reverse_cumsum_lastdim(x)
        # move the scanned dim last, scan, move it back
        xt = x.transpose(self.dim, -1).contiguous()
        return rev_cumsum.reverse_cumsum_lastdim(xt).transpose(self.dim, -1).contiguous()
