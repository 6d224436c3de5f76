import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cmath>

// in-place style: caller supplies the output buffer; per-channel scale/shift computed in double
void bn_relu_out(const torch::Tensor& x, const torch::Tensor& running_mean, const torch::Tensor& running_var,
                 const torch::Tensor& weight, const torch::Tensor& bias, double eps, torch::Tensor& out) {
    TORCH_CHECK(x.sizes() == out.sizes(), "out must match x");
    const int64_t N = x.size(0), C = x.size(1), HW = x.numel() / (N * C);
    const float* X = x.data_ptr<float>();
    float* Y = out.data_ptr<float>();
    const float* rm = running_mean.data_ptr<float>();
    const float* rv = running_var.data_ptr<float>();
    const float* w = weight.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    #pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) {
            const double inv = 1.0 / std::sqrt((double)rv[c] + eps);
            const float sc = (float)((double)w[c] * inv);
            const float sh = (float)((double)b[c] - (double)rm[c] * (double)w[c] * inv);
            const float* xs = X + (n * C + c) * HW;
            float* ys = Y + (n * C + c) * HW;
            #pragma omp simd
            for (int64_t i = 0; i < HW; ++i) ys[i] = std::fmax(xs[i] * sc + sh, 0.0f);
        }
    }
}
"""

_mod = load_inline(name="bn_relu_out_omp", cpp_sources=src, functions=["bn_relu_out"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
        self.weight = nn.Parameter(bn.weight.detach().clone())
        self.bias = nn.Parameter(bn.bias.detach().clone())
        self.register_buffer("running_mean", bn.running_mean.clone())
        self.register_buffer("running_var", bn.running_var.clone())
        self.eps = bn.eps

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        _mod.bn_relu_out(x, self.running_mean, self.running_var, self.weight, self.bias, self.eps, out)
        return out
