import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

// one [2, B] output: row 0 = mean, row 1 = max
torch::Tensor stats_stacked(torch::Tensor x) {
    x = x.contiguous();
    const int64_t B = x.size(0), N = x.size(1);
    auto out = torch::empty({2, B}, x.options());
    const float* xp = x.data_ptr<float>();
    float* mean = out.data_ptr<float>();
    float* mx = mean + B;
    at::parallel_for(0, B, 8, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const float* r = xp + b * N;
            float s = 0.f, m = r[0];
            for (int64_t j = 0; j < N; ++j) { s += r[j]; m = std::fmax(m, r[j]); }
            mean[b] = s / N;
            mx[b] = m;
        }
    });
    return out;
}
"""

stats = load_inline(name="stats_stacked_cpu", cpp_sources=cpp, functions=["stats_stacked"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        mean, mx = stats.stats_stacked(x).unbind(0)
        return mean, mx
