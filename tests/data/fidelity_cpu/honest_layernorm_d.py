import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ln_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor layer_norm_2d(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "expected a contiguous [rows, D] tensor");
    const int64_t rows = x.size(0), D = x.size(1);
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = xp + r * D;
            float mean = 0.f;
            for (int64_t j = 0; j < D; ++j) mean += xr[j];
            mean /= static_cast<float>(D);
            float var = 0.f;
            for (int64_t j = 0; j < D; ++j) { const float d = xr[j] - mean; var += d * d; }
            var /= static_cast<float>(D);
            const float rstd = 1.0f / std::sqrt(var + static_cast<float>(eps));
            float* yr = yp + r * D;
            for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - mean) * rstd * wp[j] + bp[j];
        }
    });
    return y;
}
"""

ln_ext = load_inline(name="layer_norm_2d_reshape_as", cpp_sources=ln_source, functions=["layer_norm_2d"],
                     extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        x2d = x.reshape(-1, x.size(-1)).contiguous()
        y2d = ln_ext.layer_norm_2d(x2d, self.ln.weight, self.ln.bias, self.ln.eps)
        return y2d.reshape_as(x)
