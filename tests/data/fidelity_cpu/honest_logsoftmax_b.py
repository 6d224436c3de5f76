import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <vector>
#include <cmath>

// Online (single pass) max / sum-of-exp, then a write pass. Returns {out, logsumexp}.
std::vector<torch::Tensor> online_log_softmax(torch::Tensor x) {
    x = x.contiguous();
    const int64_t N = x.size(0), D = x.size(1);
    auto out = torch::empty_like(x);
    auto lse = torch::empty({N}, x.options());
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    float* pl = lse.data_ptr<float>();
    at::parallel_for(0, N, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* row = px + r * D;
            float m = -INFINITY;
            float s = 0.f;
            for (int64_t j = 0; j < D; ++j) {
                const float v = row[j];
                if (v > m) { s = s * std::exp(m - v) + 1.f; m = v; }
                else { s += std::exp(v - m); }
            }
            const float l = m + std::log(s);
            pl[r] = l;
            float* orow = po + r * D;
            for (int64_t j = 0; j < D; ++j) orow[j] = row[j] - l;
        }
    });
    return {out, lse};
}
"""

ext = load_inline(name="online_log_softmax_cpu", cpp_sources=src, functions=["online_log_softmax"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.dim in (1, -1) and x.dim() == 2
        out, _lse = ext.online_log_softmax(x)
        return out
