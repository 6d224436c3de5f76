import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor relu_k(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* o = y.data_ptr<float>();
    at::parallel_for(0, xc.numel(), 4096, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) o[i] = a[i] > 0.f ? a[i] : 0.f;
    });
    return y;
}

torch::Tensor sigmoid_k(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* o = y.data_ptr<float>();
    at::parallel_for(0, xc.numel(), 4096, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) o[i] = 1.f / (1.f + std::exp(-a[i]));
    });
    return y;
}
"""

acts = load_inline(name="relu_sigmoid_concat", cpp_sources=src, functions=["relu_k", "sigmoid_k"],
                   extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # the two activations come from our kernels; concatenation is a copy
        return torch.concat([acts.relu_k(x), acts.sigmoid_k(x)], dim=1)
