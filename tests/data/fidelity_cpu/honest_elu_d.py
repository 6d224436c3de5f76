import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

elu_src = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor elu_fwd(const torch::Tensor& input, double alpha) {
    // compute in float32 whatever the input dtype, convert back at the end
    auto x = input.to(torch::kFloat).contiguous();
    auto y = at::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const float a = (float)alpha;
    at::parallel_for(0, x.numel(), at::internal::GRAIN_SIZE, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) yp[i] = xp[i] > 0.f ? xp[i] : a * std::expm1(xp[i]);
    });
    return y.to(input.scalar_type());
}
"""

elu_mod = load_inline(name="elu_fwd_threads", cpp_sources=elu_src, functions=["elu_fwd"],
                      extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha
        # use every core for at::parallel_for
        torch.set_num_threads(max(1, os.cpu_count() or 1))

    def forward(self, x):
        return elu_mod.elu_fwd(x, self.alpha)
