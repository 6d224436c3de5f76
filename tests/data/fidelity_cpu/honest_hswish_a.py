import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

hswish_src = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>

// in place on y (a fresh copy of x owned by the caller)
void scale_hardswish_bias_clamp_(torch::Tensor y, torch::Tensor bias, double scale, double lo, double hi) {
    TORCH_CHECK(y.is_contiguous() && y.dim() == 4, "y must be contiguous NCHW");
    const int64_t N = y.size(0), C = y.size(1), HW = y.size(2) * y.size(3);
    float* p = y.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    const float s = scale, mn = lo, mx = hi;
    at::parallel_for(0, N * C, 4, [&](int64_t begin, int64_t end) {
        for (int64_t nc = begin; nc < end; ++nc) {
            const float bc = b[nc % C];
            float* q = p + nc * HW;
            for (int64_t i = 0; i < HW; ++i) {
                const float v = q[i] * s;
                const float r6 = std::min(std::max(v + 3.0f, 0.0f), 6.0f);
                const float h = v * r6 / 6.0f;
                q[i] = std::min(std::max(h + bc, mn), mx);
            }
        }
    });
}
"""

hswish_ext = load_inline(name="scale_hardswish_bias_clamp_inplace", cpp_sources=hswish_src,
                         functions=["scale_hardswish_bias_clamp_"], extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, channels, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(channels, 1, 1) * 0.5)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        y = x.clone(memory_format=torch.contiguous_format)
        hswish_ext.scale_hardswish_bias_clamp_(y, self.bias, self.scale, self.clamp_min, self.clamp_max)
        return y
