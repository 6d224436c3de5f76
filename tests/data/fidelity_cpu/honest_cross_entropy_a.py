import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ce_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <algorithm>
#include <vector>

torch::Tensor cross_entropy_mean(torch::Tensor logits, torch::Tensor targets) {
    TORCH_CHECK(logits.dim() == 2, "logits must be (N, C)");
    TORCH_CHECK(targets.scalar_type() == torch::kLong, "targets must be int64");
    auto lg = logits.contiguous();
    auto tg = targets.contiguous();
    const int64_t N = lg.size(0), C = lg.size(1);
    const float* L = lg.data_ptr<float>();
    const int64_t* Tg = tg.data_ptr<int64_t>();
    std::vector<double> per_row(N);
    at::parallel_for(0, N, 16, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) {
            const float* row = L + i * C;
            const float mx = *std::max_element(row, row + C);
            double se = 0.0;
            for (int64_t c = 0; c < C; ++c) se += std::exp((double)row[c] - mx);
            const int64_t t = Tg[i];
            TORCH_CHECK(t >= 0 && t < C, "target out of range");
            per_row[i] = (mx + std::log(se)) - (double)row[t];
        }
    });
    double total = 0.0;
    for (int64_t i = 0; i < N; ++i) total += per_row[i];
    auto out = torch::empty({}, lg.options());
    out.data_ptr<float>()[0] = (float)(total / N);
    return out;
}
"""

ce_ext = load_inline(name="cross_entropy_mean_cpu", cpp_sources=ce_source, functions=["cross_entropy_mean"],
                     extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return ce_ext.cross_entropy_mean(predictions, targets)
