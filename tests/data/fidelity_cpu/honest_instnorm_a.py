import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

inorm_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor instance_norm2d(torch::Tensor x, double eps) {
    TORCH_CHECK(x.dim() == 4, "expected (N, C, H, W)");
    auto xc = x.contiguous();
    const int64_t planes = xc.size(0) * xc.size(1);
    const int64_t HW = xc.size(2) * xc.size(3);
    auto y = torch::empty_like(xc);
    const float* X = xc.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    at::parallel_for(0, planes, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            const float* xp = X + p * HW;
            float* yp = Y + p * HW;
            float s = 0.f;
            for (int64_t i = 0; i < HW; ++i) s += xp[i];
            const float mean = s / (float)HW;
            float v = 0.f;
            for (int64_t i = 0; i < HW; ++i) { const float d = xp[i] - mean; v += d * d; }
            const float inv_std = 1.0f / std::sqrt(v / (float)HW + (float)eps);
            for (int64_t i = 0; i < HW; ++i) yp[i] = (xp[i] - mean) * inv_std;
        }
    });
    return y;
}
"""

inorm = load_inline(name="instance_norm2d_cpu", cpp_sources=[inorm_source], functions=["instance_norm2d"],
                    extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.num_features = num_features
        self.eps = 1e-5

    def forward(self, x):
        return inorm.instance_norm2d(x, self.eps)
