import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Online softmax over the last dim (one pass for max+sum), applied to a channels-last copy of x.
lastdim_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <limits>

void online_softmax_lastdim(const torch::Tensor& x, torch::Tensor& y) {
    const int64_t C = x.size(-1);
    const int64_t rows = x.numel() / C;
    const float* X = x.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = X + r * C;
            float* yr = Y + r * C;
            float m = -std::numeric_limits<float>::infinity();
            float d = 0.f;
            for (int64_t c = 0; c < C; ++c) {
                const float v = xr[c];
                if (v > m) { d = d * std::exp(m - v) + 1.f; m = v; }
                else { d += std::exp(v - m); }
            }
            const float inv = 1.f / d;
            for (int64_t c = 0; c < C; ++c) yr[c] = std::exp(xr[c] - m) * inv;
        }
    });
}
"""

ext = load_inline(name="online_softmax_lastdim", cpp_sources=lastdim_src,
                  functions=["online_softmax_lastdim"], extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # (N, C, H, W) -> (N, H, W, C): softmax over C becomes a last-dim softmax
        x_cl = x.permute(0, 2, 3, 1).contiguous()
        y_cl = torch.empty_like(x_cl)
        ext.online_softmax_lastdim(x_cl, y_cl)
        return y_cl.permute(0, 3, 1, 2)  # channels-last strided view of the NCHW result
