import math
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Extension 1: plain linear layer (x @ W^T + b), OpenMP over output rows
linear_src = """
#include <torch/extension.h>
#include <omp.h>

torch::Tensor linear_forward(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
    auto x = input.contiguous();
    auto w = weight.contiguous();
    const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
    auto y = torch::empty({n, m}, x.options());
    const float* X = x.data_ptr<float>();
    const float* W = w.data_ptr<float>();
    const float* Bi = bias.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < m; ++j) {
            float s = Bi[j];
            for (int64_t p = 0; p < k; ++p) s += X[i * k + p] * W[j * k + p];
            Y[i * m + j] = s;
        }
    }
    return y;
}
"""

# Extension 2: in-place epilogue y <- sigmoid(y) * scale + y on the buffer extension 1 returned
epilogue_src = """
#include <torch/extension.h>
#include <cmath>

void sigmoid_scale_residual_(torch::Tensor y, double scale) {
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    float* p = y.data_ptr<float>();
    const int64_t n = y.numel();
    const float s = (float)scale;
    #pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) {
        const float v = p[i];
        p[i] = v + s / (1.0f + expf(-v));
    }
}
"""

linear_ext = load_inline(name="linear_omp_ext", cpp_sources=linear_src, functions=["linear_forward"],
                         extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)
epilogue_ext = load_inline(name="sigmoid_scale_residual_ext", cpp_sources=epilogue_src,
                           functions=["sigmoid_scale_residual_"], extra_cflags=["-O3", "-fopenmp"],
                           extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size, input_size))
        self.bias = nn.Parameter(torch.empty(hidden_size))
        # same initialisation as nn.Linear.reset_parameters
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.bias, -bound, bound)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        with torch.no_grad():
            y = linear_ext.linear_forward(x, self.weight, self.bias)
            epilogue_ext.sigmoid_scale_residual_(y, self.scaling_factor)
        return y
