from typing import Tuple

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <vector>
#include <limits>

std::vector<at::Tensor> mean_and_max(at::Tensor x) {
    TORCH_CHECK(x.dim() == 2, "expected [B, N]");
    x = x.contiguous();
    const int64_t B = x.size(0), N = x.size(1);
    at::Tensor mean = at::empty({B}, x.options());
    at::Tensor mx = at::empty({B}, x.options());
    auto xa = x.accessor<float, 2>();
    auto ma = mean.accessor<float, 1>();
    auto xa_max = mx.accessor<float, 1>();
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            double s = 0.0;
            float m = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < N; ++j) {
                const float v = xa[b][j];
                s += v;
                m = (v > m || v != v) ? v : m;
            }
            ma[b] = static_cast<float>(s / N);
            xa_max[b] = m;
        }
    });
    return {mean, mx};
}
"""

ext = load_inline(name="mean_and_max_cpu", cpp_sources=CPP_SOURCE, functions=["mean_and_max"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        mean, mx = ext.mean_and_max(x)
        return mean, mx
