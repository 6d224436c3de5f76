import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

group_norm_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor group_norm_forward(torch::Tensor input, torch::Tensor gamma, torch::Tensor beta,
                                 int64_t num_groups, double eps) {
    TORCH_CHECK(input.dim() >= 2, "input must be (N, C, ...)");
    auto x = input.contiguous();
    const int64_t N = x.size(0), C = x.size(1);
    const int64_t HxW = x.numel() / (N * C);
    TORCH_CHECK(C % num_groups == 0, "C must be divisible by num_groups");
    const int64_t Cg = C / num_groups;
    const int64_t group_size = Cg * HxW;
    auto y = torch::empty_like(x);
    const float* X = x.data_ptr<float>();
    const float* G = gamma.data_ptr<float>();
    const float* Bt = beta.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    at::parallel_for(0, N * num_groups, 1, [&](int64_t begin, int64_t end) {
        for (int64_t ng = begin; ng < end; ++ng) {
            const float* xg = X + ng * group_size;
            float* yg = Y + ng * group_size;
            double sum = 0.0;
            for (int64_t i = 0; i < group_size; ++i) sum += xg[i];
            const double mean = sum / group_size;
            double sq = 0.0;
            for (int64_t i = 0; i < group_size; ++i) { const double d = xg[i] - mean; sq += d * d; }
            const double rstd = 1.0 / std::sqrt(sq / group_size + eps);
            const int64_t g = ng % num_groups;
            for (int64_t c = 0; c < Cg; ++c) {
                const int64_t ch = g * Cg + c;
                const float a = (float)(rstd * G[ch]);
                const float b = (float)(Bt[ch] - mean * rstd * G[ch]);
                const float* xc = xg + c * HxW;
                float* yc = yg + c * HxW;
                for (int64_t i = 0; i < HxW; ++i) yc[i] = xc[i] * a + b;
            }
        }
    });
    return y;
}
"""

group_norm = load_inline(
    name="group_norm_cpu_two_pass",
    cpp_sources=group_norm_source,
    functions=["group_norm_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.num_groups = num_groups
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return group_norm.group_norm_forward(x, self.weight, self.bias, self.num_groups, self.eps)
