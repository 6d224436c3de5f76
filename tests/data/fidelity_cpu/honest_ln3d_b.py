import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = """
#include <torch/extension.h>
#include <omp.h>
#include <cmath>

torch::Tensor layernorm_fwd(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, int64_t normalized_numel, float eps) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t M = xc.numel() / normalized_numel;
    const int64_t D = normalized_numel;
    const float* xp = xc.data_ptr<float>();
    const float* g = gamma.data_ptr<float>();
    const float* b = beta.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < M; ++r) {
        const float* xr = xp + r * D;
        float* orow = op + r * D;
        float sum = 0.f;
        #pragma omp parallel for simd reduction(+:sum)
        for (int64_t i = 0; i < D; ++i) sum += xr[i];
        const float mean = sum / D;
        float sq = 0.f;
        #pragma omp parallel for simd reduction(+:sq)
        for (int64_t i = 0; i < D; ++i) { const float d = xr[i] - mean; sq += d * d; }
        const float rstd = 1.0f / std::sqrt(sq / D + eps);
        #pragma omp parallel for simd
        for (int64_t i = 0; i < D; ++i) orow[i] = (xr[i] - mean) * rstd * g[i] + b[i];
    }
    return out;
}
"""

layernorm = load_inline(name="layernorm_fp32_omp_two_pass", cpp_sources=cpp_src, functions=["layernorm_fwd"],
                        extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x):
        ln = self.ln
        return layernorm.layernorm_fwd(x, ln.weight, ln.bias, ln.weight.numel(), ln.eps)
