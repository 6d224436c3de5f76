import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <limits>

// two-pass softmax over dim 1 of NCHW with double accumulation of the denominator
torch::Tensor softmax_dim1_fwd(torch::Tensor x) {
    x = x.contiguous();
    const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (x.size(0) * x.size(1));
    auto y = torch::empty_like(x);
    const float* X = x.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    at::parallel_for(0, N * S, 256, [&](int64_t a, int64_t b) {
        for (int64_t t = a; t < b; ++t) {
            const int64_t n = t / S, s = t % S;
            const float* xs = X + n * C * S + s;
            float* ys = Y + n * C * S + s;
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t c = 0; c < C; ++c) mx = std::fmax(mx, xs[c * S]);
            double sum = 0.0;
            for (int64_t c = 0; c < C; ++c) sum += std::exp((double)xs[c * S] - (double)mx);
            const double inv = 1.0 / sum;
            for (int64_t c = 0; c < C; ++c) ys[c * S] = (float)(std::exp((double)xs[c * S] - (double)mx) * inv);
        }
    });
    return y;
}
"""

_softmax_ext = load_inline(name="softmax_dim1_autograd", cpp_sources=cpp_source,
                           functions=["softmax_dim1_fwd"], verbose=False)


class SoftmaxDim1Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = _softmax_ext.softmax_dim1_fwd(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved_tensors
        # d softmax: y * (g - sum(g * y))
        return y * (grad_out - (grad_out * y).sum(dim=1, keepdim=True))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return SoftmaxDim1Function.apply(x)
