import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rms_src = r"""
#include <torch/extension.h>
#include <omp.h>
#include <cmath>

// x: (B, C, *spatial) ; normalise every (b, s) position over the C channels
torch::Tensor rms_norm_channels(torch::Tensor x, double eps) {
    TORCH_CHECK(x.dim() >= 2, "need at least 2 dims");
    auto xc = x.contiguous();
    const int64_t B = xc.size(0), C = xc.size(1);
    const int64_t S = xc.numel() / (B * C);
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    #pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t s = 0; s < S; ++s) {
            const float* base = in + b * C * S + s;
            double ss = 0.0;
            for (int64_t c = 0; c < C; ++c) {
                const double v = base[c * S];
                ss += v * v;
            }
            const float inv = (float)(1.0 / std::sqrt(ss / (double)C + eps));
            float* ob = o + b * C * S + s;
            for (int64_t c = 0; c < C; ++c) ob[c * S] = base[c * S] * inv;
        }
    }
    return out;
}
"""

rms_ext = load_inline(name="rms_norm_channels_omp", cpp_sources=rms_src, functions=["rms_norm_channels"],
                      extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_ext.rms_norm_channels(x, self.eps)
