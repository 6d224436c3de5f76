import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_source = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "x must be float32");
    TORCH_CHECK(gamma.numel() == x.size(-1) && beta.numel() == x.size(-1), "bad affine shape");
    const int64_t D = x.size(-1);
    auto x2 = x.contiguous().view({-1, D});
    auto out = torch::empty_like(x2);
    auto xa = x2.accessor<float, 2>();
    auto oa = out.accessor<float, 2>();
    auto ga = gamma.accessor<float, 1>();
    auto ba = beta.accessor<float, 1>();
    const int64_t N = x2.size(0);
    at::parallel_for(0, N, 4, [&](int64_t start, int64_t stop) {
        for (int64_t i = start; i < stop; ++i) {
            // Welford for numerical stability
            double mean = 0.0, m2 = 0.0;
            for (int64_t j = 0; j < D; ++j) {
                double v = xa[i][j];
                double delta = v - mean;
                mean += delta / (j + 1);
                m2 += delta * (v - mean);
            }
            double var = m2 / D;
            float rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
            float mu = static_cast<float>(mean);
            for (int64_t j = 0; j < D; ++j) {
                oa[i][j] = (xa[i][j] - mu) * rstd * ga[j] + ba[j];
            }
        }
    });
    return out.view(x.sizes());
}
"""

layernorm_cpp = load_inline(
    name="layernorm_welford_cpu",
    cpp_sources=[layernorm_source],
    functions=["layernorm_forward"],
    verbose=False,
    extra_cflags=["-O2"],
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        # keep an nn.LayerNorm so the parameters are initialised exactly like the reference's
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return layernorm_cpp.layernorm_forward(x, self.ln.weight, self.ln.bias, self.ln.eps)
