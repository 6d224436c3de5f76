import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

namespace {

void layernorm(const float* x, const float* g, const float* b, float* y, int64_t rows, int64_t D, float eps) {
    at::parallel_for(0, rows, 4, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * D;
            float* yr = y + r * D;
            float mean = 0.f;
            for (int64_t j = 0; j < D; ++j) mean += xr[j];
            mean /= D;
            float var = 0.f;
            for (int64_t j = 0; j < D; ++j) { float d = xr[j] - mean; var += d * d; }
            var /= D;
            const float rstd = 1.f / std::sqrt(var + eps);
            for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - mean) * rstd * g[j] + b[j];
        }
    });
}

// y = a @ w^T + bias, optional exact GELU, optional + residual
void linear(const float* a, const float* w, const float* bias, const float* res, float* y,
            int64_t M, int64_t K, int64_t N, bool gelu) {
    at::parallel_for(0, M, 1, [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) {
            const float* ar = a + m * K;
            for (int64_t n = 0; n < N; ++n) {
                const float* wr = w + n * K;
                float acc = bias[n];
                for (int64_t k = 0; k < K; ++k) acc += ar[k] * wr[k];
                if (gelu) acc = 0.5f * acc * (1.f + std::erf(acc * 0.70710678f));
                if (res) acc += res[m * N + n];
                y[m * N + n] = acc;
            }
        }
    });
}

}  // namespace

torch::Tensor prenorm_mlp(torch::Tensor x, torch::Tensor ln_w, torch::Tensor ln_b, double eps,
                          torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2) {
    auto xc = x.contiguous();
    const int64_t D = xc.size(-1);
    const int64_t M = xc.numel() / D;
    const int64_t F = w1.size(0);
    auto normed = torch::empty({M, D}, xc.options());
    auto hidden = torch::empty({M, F}, xc.options());
    auto out = torch::empty_like(xc);
    layernorm(xc.data_ptr<float>(), ln_w.data_ptr<float>(), ln_b.data_ptr<float>(), normed.data_ptr<float>(),
              M, D, static_cast<float>(eps));
    linear(normed.data_ptr<float>(), w1.data_ptr<float>(), b1.data_ptr<float>(), nullptr, hidden.data_ptr<float>(),
           M, D, F, true);
    linear(hidden.data_ptr<float>(), w2.data_ptr<float>(), b2.data_ptr<float>(), xc.data_ptr<float>(),
           out.data_ptr<float>(), M, F, D, false);
    return out;
}
"""

prenorm_ext = load_inline(name="prenorm_mlp_cpu", cpp_sources=cpp_source, functions=["prenorm_mlp"],
                          extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return prenorm_ext.prenorm_mlp(
            x, self.norm.weight, self.norm.bias, self.norm.eps,
            self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias,
        )
