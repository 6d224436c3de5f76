import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor relu_scale_fwd(torch::Tensor x, double scale) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const float s = (float)scale;
    at::parallel_for(0, xc.numel(), 4096, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) yp[i] = xp[i] > 0.f ? xp[i] * s : 0.f;
    });
    return y;
}
"""

_ext = load_inline(name="relu_scale_autograd", cpp_sources=_src, functions=["relu_scale_fwd"], verbose=False)


class ReluScaleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return _ext.relu_scale_fwd(x, scale)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        grad_in = grad_out * (x > 0).to(grad_out.dtype) * ctx.scale
        return grad_in, None


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x):
        return ReluScaleFunction.apply(x, self.scale)
