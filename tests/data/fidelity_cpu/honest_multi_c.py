import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <limits>
#include <utility>

std::pair<float, float> row_stats(const float* row, int64_t n) {
    // at::parallel_reduce over the row: (sum, max)
    using P = std::pair<float, float>;
    return at::parallel_reduce(0, n, 1 << 16, P(0.f, -std::numeric_limits<float>::infinity()),
        [&](int64_t b, int64_t e, P acc) {
            for (int64_t i = b; i < e; ++i) { acc.first += row[i]; acc.second = std::max(acc.second, row[i]); }
            return acc;
        },
        [](P a, P b) { return P(a.first + b.first, std::max(a.second, b.second)); });
}

void mean_max_out(torch::Tensor x, torch::Tensor mean_out, torch::Tensor max_out) {
    const int64_t B = x.size(0), N = x.size(1);
    const float* xp = x.data_ptr<float>();
    float* mp = mean_out.data_ptr<float>();
    float* ap = max_out.data_ptr<float>();
    for (int64_t b = 0; b < B; ++b) {
        auto st = row_stats(xp + b * N, N);
        mp[b] = st.first / static_cast<float>(N);
        ap[b] = st.second;
    }
}
"""

ext = load_inline(name="mean_max_parallel_reduce", cpp_sources=cpp_src, functions=["mean_max_out"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        B = x.shape[0]
        mean = torch.empty(B, dtype=x.dtype, device=x.device)
        mx = torch.empty(B, dtype=x.dtype, device=x.device)
        ext.mean_max_out(x, mean, mx)
        return mean, mx
