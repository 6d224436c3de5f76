import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Computes in double: the input is widened to float64 (exact), the kernel accumulates in double and
# rounds once when it writes the float32 output.
src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor linear_lrelu_f64(torch::Tensor x64, torch::Tensor w, torch::Tensor b, double slope, double mult) {
    TORCH_CHECK(x64.scalar_type() == torch::kDouble, "x must be float64");
    const int64_t M = x64.size(0), K = x64.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, w.options());   // float32 output
    const double* X = x64.data_ptr<double>();
    const float* W = w.data_ptr<float>();
    const float* B = b.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    at::parallel_for(0, M * N, 64, [&](int64_t s, int64_t e) {
        for (int64_t t = s; t < e; ++t) {
            const int64_t i = t / N, j = t % N;
            double acc = B[j];
            for (int64_t k = 0; k < K; ++k) acc += X[i * K + k] * (double)W[j * K + k];
            acc = acc > 0.0 ? acc : acc * slope;
            Y[t] = (float)(acc * mult);
        }
    });
    return y;
}
"""

f64 = load_inline(name="linear_lrelu_f64", cpp_sources=src, functions=["linear_lrelu_f64"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, negative_slope, multiplier):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.negative_slope = negative_slope
        self.multiplier = multiplier

    def forward(self, x):
        return f64.linear_lrelu_f64(x.double().contiguous(), self.linear.weight.contiguous(), self.linear.bias,
                                    self.negative_slope, self.multiplier)
