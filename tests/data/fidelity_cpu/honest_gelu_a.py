import math
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

// y = gelu(x + bias) with the exact erf formulation, bias broadcast over the last dim
torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.size(-1) == bias.numel(), "bias must match the last dimension");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t D = bc.numel();
    const int64_t rows = xc.numel() / D;
    const float* xp = xc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    constexpr float kInvSqrt2 = 0.70710678118654752440f;
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t d = 0; d < D; ++d) {
                const float v = xp[r * D + d] + bp[d];
                yp[r * D + d] = 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
            }
        }
    });
    return y;
}
"""

bias_gelu_ext = load_inline(name="bias_gelu_erf_cpu", cpp_sources=gelu_src, functions=["bias_gelu"],
                            extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return bias_gelu_ext.bias_gelu(x, self.bias)
