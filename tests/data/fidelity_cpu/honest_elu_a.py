import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

elu_cpp = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor elu_forward(torch::Tensor x, double alpha) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const float a = static_cast<float>(alpha);
    at::parallel_for(0, xc.numel(), 4096, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const float v = in[i];
            o[i] = v > 0.f ? v : a * std::expm1(v);
        }
    });
    return out;
}
"""

elu = load_inline(name="elu_parallel_for", cpp_sources=elu_cpp, functions=["elu_forward"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return elu.elu_forward(x, self.alpha)
