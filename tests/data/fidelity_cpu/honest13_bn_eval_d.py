import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# BatchNorm (inference) folded into a per-channel scale/shift once at construction; the kernel applies
# y = relu(x * scale[c] + shift[c]).
src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor scale_shift_relu(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    auto xc = x.contiguous();
    const int64_t N = xc.size(0), C = xc.size(1), HW = xc.numel() / (N * C);
    auto y = torch::empty_like(xc);
    const float* X = xc.data_ptr<float>();
    const float* S = scale.data_ptr<float>();
    const float* T = shift.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    at::parallel_for(0, N * C, 4, [&](int64_t a, int64_t b) {
        for (int64_t p = a; p < b; ++p) {
            const float s = S[p % C], t = T[p % C];
            for (int64_t i = 0; i < HW; ++i) {
                const float v = X[p * HW + i] * s + t;
                Y[p * HW + i] = v > 0.f ? v : 0.f;
            }
        }
    });
    return y;
}
"""

ssr = load_inline(name="scale_shift_relu_folded", cpp_sources=src, functions=["scale_shift_relu"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
            inv_std = torch.rsqrt(bn.running_var + bn.eps)
            scale = bn.weight * inv_std
            shift = bn.bias - bn.running_mean * scale
        self.register_buffer("scale", scale.contiguous())
        self.register_buffer("shift", shift.contiguous())

    def forward(self, x):
        return ssr.scale_shift_relu(x, self.scale, self.shift)
