import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_cpp = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor add_gelu(torch::Tensor x, torch::Tensor b) {
    // x and b have the same (already broadcast, contiguous) shape
    TORCH_CHECK(x.sizes() == b.sizes(), "x and b must have the same shape");
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, x.numel(), 8192, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) {
            const float v = xp[i] + bp[i];
            yp[i] = 0.5f * v * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2)));
        }
    });
    return y;
}
"""

add_gelu_ext = load_inline(name="add_gelu_broadcast_typeas", cpp_sources=gelu_cpp, functions=["add_gelu"],
                           extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = x.contiguous()
        b = self.bias.type_as(x).expand_as(x).contiguous()
        return add_gelu_ext.add_gelu(x, b)
